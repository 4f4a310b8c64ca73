#include "checkpoint/lineage.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>

#include "checkpoint/checksum.h"
#include "core/error.h"

namespace pptrain {

bool parse_lineage(const std::string& text, std::vector<LineageEntry>& out) {
  out.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('/', pos);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(pos, end - pos);
    const size_t colon = part.find(':');
    if (colon == std::string::npos || colon == 0) return false;
    LineageEntry e{part.substr(0, colon), 0};
    const char* first = part.data() + colon + 1;
    const char* last = part.data() + part.size();
    auto [p, ec] = std::from_chars(first, last, e.start);
    if (ec != std::errc() || p != last || first == last || e.start < 0) return false;
    out.push_back(e);
    pos = end + 1;
  }
  return true;
}

std::string lineage_text(const std::vector<LineageEntry>& entries) {
  std::string s;
  for (const LineageEntry& e : entries) s += cat(s.empty() ? "" : "/", e.run, ":", e.start);
  return s;
}

std::string extend_lineage(const std::string& parent, const std::string& run, int64_t start, size_t max_entries) {
  std::vector<LineageEntry> entries;
  if (!parse_lineage(parent, entries)) entries.clear();  // an unreadable parent starts a new line
  entries.push_back({run, start});
  if (entries.size() > max_entries) entries.erase(entries.begin(), entries.end() - ptrdiff_t(max_entries));
  return lineage_text(entries);
}

bool in_lineage(const std::string& file, int64_t file_step, const std::string& current) {
  std::vector<LineageEntry> f, c;
  if (!parse_lineage(file, f) || !parse_lineage(current, c) || f.empty() || c.empty()) return false;
  for (size_t j = 0; j < c.size(); ++j) {
    if (c[j].run != f.back().run) continue;
    // The file's line must be the current line up to run j (as far as both reach back:
    // either may have dropped its oldest entries).
    for (size_t k = 0; k < f.size() && k <= j; ++k)
      if (f[f.size() - 1 - k] != c[j - k]) return false;
    // Run j's own checkpoints count up to where the current line left it.
    return j + 1 == c.size() || file_step <= c[j + 1].start;
  }
  return false;
}

std::string new_run_id() {
  std::random_device device;
  const uint64_t clock = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t id = mix64(clock ^ mix64(uint64_t(::getpid()) << 32 ^ device()) ^ (uint64_t(device()) << 32));
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

}  // namespace pptrain
