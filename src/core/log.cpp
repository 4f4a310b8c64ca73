#include "core/log.h"

#include <cstdio>

namespace pptrain::log {
namespace {
int g_rank = 0;
int g_world = 1;
bool g_quiet = false;

void emit(const char* level, const std::string& s) {
  if (g_world > 1)
    std::fprintf(stderr, "[rank %d] %s%s\n", g_rank, level, s.c_str());
  else
    std::fprintf(stderr, "%s%s\n", level, s.c_str());
  std::fflush(stderr);
}
}  // namespace

void set_rank(int rank, int world) { g_rank = rank; g_world = world; }
int rank() { return g_rank; }
void set_quiet(bool quiet) { g_quiet = quiet; }

void info_line(const std::string& s) {
  if (g_rank != 0 || g_quiet) return;
  std::fprintf(stdout, "%s\n", s.c_str());
  std::fflush(stdout);
}
void warn_line(const std::string& s) { emit("warning: ", s); }
void error_line(const std::string& s) { emit("error: ", s); }

}  // namespace pptrain::log
