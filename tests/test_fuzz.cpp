// The fuzz targets as part of `make test`: every tests/fuzz/fuzz_<name>.cpp (built by
// mk/fuzz.mk to BUILD/fuzz/fuzz_<name>) runs from its seeds (tests/fuzz/corpus/<name>/) for
// FUZZ_TEST_SECONDS (default 5) and replays every input under tests/fuzz/regressions/<name>/
// (what earlier runs found, since fixed). A crash, a sanitizer report, an uncaught
// exception, a timeout or a target that was not built fails the test; `make fuzz` runs
// the same targets for minutes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace fs = std::filesystem;
using pptrain::testing::run_command;
using pptrain::testing::TempDir;

namespace {

// The names <name> of tests/fuzz/fuzz_<name>.cpp, sorted.
std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator("tests/fuzz")) {
    const std::string file = entry.path().filename().string();
    if (file.starts_with("fuzz_") && file.ends_with(".cpp")) names.push_back(file.substr(5, file.size() - 9));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string binary(const std::string& name) {
  return (fs::path(pptrain::testing::pptrain_bin()).parent_path() / "fuzz" / ("fuzz_" + name)).string();
}

int seconds_per_target() {
  const char* text = std::getenv("FUZZ_TEST_SECONDS");
  const int seconds = text ? std::atoi(text) : 0;
  return seconds > 0 ? seconds : 5;
}

std::string tail(const std::string& text, size_t n = 4000) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

}  // namespace

TEST(Fuzz, EveryTargetIsBuiltAndHasSeeds) {
  const auto names = target_names();
  ASSERT_GE(names.size(), 4u) << "expected the config, schedule_csv, token_shard and llmc targets";
  for (const std::string& name : names) {
    EXPECT_TRUE(fs::exists(binary(name))) << binary(name) << " not built (mk/fuzz.mk needs clang++-14)";
    EXPECT_TRUE(fs::is_directory("tests/fuzz/corpus/" + name) && !fs::is_empty("tests/fuzz/corpus/" + name))
        << "no seeds in tests/fuzz/corpus/" << name << " (tests/fuzz/make_corpus.sh)";
  }
}

// Each regression input once: they crashed before their fix.
TEST(Fuzz, RegressionInputsRunClean) {
  for (const std::string& name : target_names()) {
    const std::string dir = "tests/fuzz/regressions/" + name;
    if (!fs::is_directory(dir) || fs::is_empty(dir) || !fs::exists(binary(name))) continue;
    std::string files;
    for (const auto& entry : fs::directory_iterator(dir)) files += " '" + entry.path().string() + "'";
    auto r = run_command("timeout -k 5 120 " + binary(name) + " -timeout=10 -rss_limit_mb=2048" + files, 150);
    EXPECT_EQ(r.exit_code, 0) << name << ": a regression input fails again:\n" << tail(r.output);
  }
}

// A short run of each target from its seeds; prints how many inputs it executed.
TEST(Fuzz, ShortRunOfEachTargetFindsNothing) {
  const int seconds = seconds_per_target();
  for (const std::string& name : target_names()) {
    if (!fs::exists(binary(name))) continue;  // reported by EveryTargetIsBuiltAndHasSeeds
    TempDir scratch;  // new inputs and any crash go here, not into the committed seeds
    auto r = run_command("timeout -k 5 " + std::to_string(seconds + 60) + " " + binary(name) +
                             " -max_total_time=" + std::to_string(seconds) +
                             " -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=" +
                             scratch.path() + "/ " + scratch.path() + " tests/fuzz/corpus/" + name,
                         seconds + 90);
    EXPECT_EQ(r.exit_code, 0) << name << ": the fuzzer found an input that fails (copy it from the "
                              << "artifact line below to tests/fuzz/regressions/" << name << "/):\n"
                              << tail(r.output);
    std::smatch runs;
    if (std::regex_search(r.output, runs, std::regex("stat::number_of_executed_units: ([0-9]+)")))
      std::printf("fuzz_%s: %s inputs in %d s\n", name.c_str(), runs[1].str().c_str(), seconds);
    else
      ADD_FAILURE() << name << ": no final statistics:\n" << tail(r.output);
  }
}
