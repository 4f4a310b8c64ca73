#include "support/test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace pptrain::testing {

std::string pptrain_bin() {
  const char* env = std::getenv("PPTRAIN_BIN");
  return env ? env : "build/pptrain";
}

std::string build_dir() { return std::filesystem::path(pptrain_bin()).parent_path().string(); }

std::string pptrain_emu_bin() { return (std::filesystem::path(build_dir()) / "pptrain-emu").string(); }

std::string mpirun(int ranks) {
  return "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "mpirun --oversubscribe --bind-to none -np " + std::to_string(ranks) + " ";
}

CommandResult prepare_markov_corpus(const std::string& dir, int vocab, int tokens, uint64_t seed, int order) {
  return run_command(pptrain_bin() + " prepare-data --markov --order " + std::to_string(order) + " --vocab " +
                     std::to_string(vocab) + " --tokens " + std::to_string(tokens) + " --seed " +
                     std::to_string(seed) + " --out " + dir);
}

TempDir::TempDir() {
  std::string tmpl = "/tmp/pptrain-test-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

double max_of(const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); }

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), floor);
    worst = std::max(worst, d);
  }
  return worst;
}

std::vector<double> json_values(const std::string& jsonl, const std::string& key) {
  std::vector<double> out;
  std::regex re("\"" + key + "\": ([-0-9.eE+naif]+)");
  std::istringstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back(std::stod(m[1]));
  }
  return out;
}

double json_number(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\": *([-+0-9.eE]+)"))) return std::nan("");
  return std::stod(m[1]);
}

}  // namespace pptrain::testing
