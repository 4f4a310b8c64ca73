#pragma once

namespace pptrain {

// The version every checkpoint records as its writer ("pptrain 0.1.0").
inline constexpr const char* kVersion = "0.1.0";

}  // namespace pptrain
