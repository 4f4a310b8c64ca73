// Errors. A user-facing failure (bad config, bad data, bad checkpoint, impossible layout)
// is a pptrain::Error: one line that names the file, key or rank and what was expected.
// main() prints it once per rank and aborts the whole MPI job with a non-zero status.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace pptrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// cat("a", 1, 'b') -> "a1b": builds messages without <format> (not in g++ 12).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(cat(args...));
}

// Internal invariant; a failure is a bug in pptrain, not in the user's input.
#define PPTRAIN_CHECK(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw std::logic_error(::pptrain::cat(__FILE__, ":", __LINE__, ": check failed: ", \
                                            #cond, " ", ##__VA_ARGS__));              \
  } while (0)

}  // namespace pptrain
