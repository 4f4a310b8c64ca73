// The message of the pptrain Error a call throws, or "(no error)" when it returns: how the
// bad-input tests compare one-line errors whole.
#pragma once
#include <string>

#include "core/error.h"

namespace pptrain::testing {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace pptrain::testing
