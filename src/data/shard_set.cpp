#include "data/shard_set.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/log.h"
#include "data/token_shard.h"

namespace pptrain::data {

namespace fs = std::filesystem;

std::vector<std::string> write_shard_set(const std::string& dir, const std::string& prefix,
                                         std::span<const uint16_t> tokens, uint64_t shard_tokens) {
  PPTRAIN_CHECK(shard_tokens > 0 && shard_tokens <= uint64_t(INT32_MAX));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create directory (", ec.message(), ")");

  const uint64_t count = std::max<uint64_t>(1, (tokens.size() + shard_tokens - 1) / shard_tokens);
  const int width = std::max<int>(3, int(std::to_string(count - 1).size()));
  std::vector<std::string> written;
  for (uint64_t s = 0; s < count; ++s) {
    std::string number = std::to_string(s);
    number.insert(0, size_t(width) - number.size(), '0');
    const std::string path = (fs::path(dir) / (prefix + "_" + number + ".bin")).string();
    const uint64_t begin = s * shard_tokens;
    const uint64_t end = std::min<uint64_t>(tokens.size(), begin + shard_tokens);
    write_token_shard(path, tokens.subspan(begin, end - begin));
    written.push_back(path);
  }

  // PREFIX_<digits>.bin, the names this function writes.
  auto is_shard_name = [&](const std::string& name) {
    const std::string head = prefix + "_", tail = ".bin";
    if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail))
      return false;
    return std::all_of(name.begin() + head.size(), name.end() - tail.size(),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (is_shard_name(path.filename().string()) &&
        std::find(written.begin(), written.end(), path.string()) == written.end())
      stale.push_back(path);
  }
  if (ec) fail(dir, ": cannot list directory (", ec.message(), ")");
  for (const fs::path& path : stale) {
    if (!fs::remove(path, ec)) fail(path.string(), ": cannot remove stale shard (", ec.message(), ")");
    log::info("removed stale shard ", path.string());
  }
  return written;
}

uint64_t validation_tokens(uint64_t n, double val_fraction) {
  if (!(val_fraction > 0 && val_fraction < 1))
    fail("validation fraction must be in (0, 1) (got ", val_fraction, ")");
  if (n < 2) fail("the corpus holds ", n, " token(s); a train and a val split need at least 2");
  const uint64_t val = uint64_t(std::llround(double(n) * val_fraction));
  return std::clamp<uint64_t>(val, 1, n - 1);
}

std::vector<uint16_t> read_bytes_as_tokens(const std::vector<std::string>& files) {
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::vector<uint16_t> tokens;
  std::vector<unsigned char> buffer(1 << 20);
  for (const std::string& file : files) {
    std::error_code ec;
    if (fs::is_directory(file, ec)) fail(file, ": cannot read (is a directory)");
    std::unique_ptr<std::FILE, FileCloser> in(std::fopen(file.c_str(), "rb"));
    if (!in) fail(file, ": cannot read (", std::strerror(errno), ")");
    size_t got;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), in.get())) > 0)
      tokens.insert(tokens.end(), buffer.begin(), buffer.begin() + got);
    if (std::ferror(in.get())) fail(file, ": read error (", std::strerror(errno), ")");
  }
  return tokens;
}

}  // namespace pptrain::data
