// pptrain prepare-data: writes token shards (llm.c format) for training.
//   --text FILE... : byte-level tokens (vocab 256) of the concatenated files.
//   --markov       : a synthetic order-K Markov corpus of known entropy rate, printed as
//                    "entropy_nats_per_token: X" and written to DIR/entropy.txt.
// Both write DIR/train_NNN.bin and DIR/val_NNN.bin; val is the last --val-fraction of
// the token stream.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/markov.h"
#include "data/shard_set.h"

namespace pptrain {

namespace {

const char* kPrepareUsage =
    "pptrain prepare-data --text FILE... --out DIR [--val-fraction 0.1] [--shard-tokens 100000000]\n"
    "pptrain prepare-data --markov --out DIR [--order 2] [--vocab 32] [--tokens 1000000]\n"
    "                     [--seed 1337] [--concentration 0.05] [--val-fraction 0.1] [--shard-tokens N]";

struct PrepareOptions {
  std::vector<std::string> text_files;
  bool markov = false;
  std::string out;
  double val_fraction = 0.1;
  uint64_t shard_tokens = 100000000;  // llm.c's shard size: 200 MB files
  int order = 2;
  int vocab = 32;
  uint64_t tokens = 1000000;
  uint64_t seed = 1337;
  double concentration = 0.05;  // about 1.2 nats/token for V = 32, K = 2 (ln 32 = 3.47)
  std::set<std::string> given;  // options present on the command line
};

template <typename Int>
Int parse_integer(const std::string& option, const std::string& text, Int low, Int high) {
  Int value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high)
    fail("prepare-data ", option, ": expected an integer in [", low, ", ", high, "], got '", text, "'");
  return value;
}

double parse_real(const std::string& option, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(value))
    fail("prepare-data ", option, ": expected a number, got '", text, "'");
  return value;
}

PrepareOptions parse_options(const Args& args) {
  PrepareOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& option = args[i];
    o.given.insert(option);
    if (option == "--markov") {
      o.markov = true;
      continue;
    }
    if (option == "--text") {
      while (i + 1 < args.size() && !args[i + 1].starts_with("--")) o.text_files.push_back(args[++i]);
      if (o.text_files.empty()) fail("prepare-data --text: expected one or more input files");
      continue;
    }
    if (i + 1 >= args.size()) fail("prepare-data ", option, ": missing value\n", kPrepareUsage);
    const std::string& value = args[++i];
    if (option == "--out") o.out = value;
    else if (option == "--val-fraction") o.val_fraction = parse_real(option, value);
    else if (option == "--shard-tokens")
      o.shard_tokens = parse_integer<uint64_t>(option, value, 1, INT32_MAX);
    else if (option == "--order") o.order = parse_integer<int>(option, value, 0, 64);
    else if (option == "--vocab") o.vocab = parse_integer<int>(option, value, 2, 65536);
    else if (option == "--tokens")  // the stream is built in memory: 2 bytes a token
      o.tokens = parse_integer<uint64_t>(option, value, 2, 1000000000);
    else if (option == "--seed") o.seed = parse_integer<uint64_t>(option, value, 0, UINT64_MAX);
    else if (option == "--concentration") o.concentration = parse_real(option, value);
    else fail("prepare-data: unknown option '", option, "'\n", kPrepareUsage);
  }
  if (o.markov == !o.text_files.empty())
    fail("prepare-data: give exactly one of --text FILE... or --markov\n", kPrepareUsage);
  if (o.out.empty()) fail("prepare-data: --out DIR is required\n", kPrepareUsage);
  if (!o.markov)
    for (const char* markov_only : {"--order", "--vocab", "--tokens", "--seed", "--concentration"})
      if (o.given.count(markov_only)) fail("prepare-data ", markov_only, ": applies to --markov only");
  if (!(o.val_fraction > 0 && o.val_fraction < 1))
    fail("prepare-data --val-fraction: expected a value in (0, 1), got ", o.val_fraction);
  return o;
}

// Splits the stream, writes both shard sets and reports them.
void write_train_val(const PrepareOptions& o, const std::vector<uint16_t>& tokens) {
  const uint64_t val = data::validation_tokens(tokens.size(), o.val_fraction);
  const std::span<const uint16_t> all(tokens);
  const auto train_files = data::write_shard_set(o.out, "train", all.first(all.size() - val), o.shard_tokens);
  const auto val_files = data::write_shard_set(o.out, "val", all.last(val), o.shard_tokens);
  log::info("train: ", all.size() - val, " tokens in ", train_files.size(), " shard(s) ", o.out,
            "/train_*.bin");
  log::info("val: ", val, " tokens in ", val_files.size(), " shard(s) ", o.out, "/val_*.bin");
}

void prepare_text(const PrepareOptions& o) {
  const std::vector<uint16_t> tokens = data::read_bytes_as_tokens(o.text_files);
  log::info("text: ", tokens.size(), " bytes from ", o.text_files.size(),
            " file(s), byte-level tokens (model.vocab_size 256)");
  write_train_val(o, tokens);
}

void prepare_markov(const PrepareOptions& o) {
  const auto source = data::MarkovSource::random(o.order, o.vocab, o.concentration, o.seed);
  const double entropy = source.entropy_rate();
  log::info("markov: order ", o.order, ", vocab ", o.vocab, " (model.vocab_size ", o.vocab, "), ",
            source.num_contexts(), " contexts, concentration ", o.concentration, ", seed ", o.seed);
  log::info(cat("entropy_nats_per_token: ", std::to_string(entropy)));
  log::info(cat("uniform_nats_per_token: ", std::to_string(std::log(double(o.vocab)))));
  write_train_val(o, source.generate(o.tokens, o.seed));

  const std::string path = (std::filesystem::path(o.out) / "entropy.txt").string();
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "w"));
  if (!file || std::fprintf(file.get(), "%.6f\n", entropy) < 0 || std::fflush(file.get()) != 0)
    fail(path, ": cannot write");
}

}  // namespace

int cmd_prepare_data(const Args& args) {
  for (const std::string& arg : args)
    if (arg == "--help" || arg == "-h") {
      std::printf("%s\n", kPrepareUsage);
      return 0;
    }
  const PrepareOptions options = parse_options(args);
  if (options.markov)
    prepare_markov(options);
  else
    prepare_text(options);
  return 0;
}

}  // namespace pptrain
