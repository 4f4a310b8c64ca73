// Where the GoogleTest wrappers find the MPI test programs: the Makefile builds
// tests/mpi/<name>.cpp to $(BUILD)/mpi_tests/<name>, beside $(BUILD)/tests/ that holds
// the running test binary.
#pragma once
#include <filesystem>
#include <string>

namespace pptrain::testing {

inline std::string mpi_test_program(const std::string& name) {
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  return (self.parent_path().parent_path() / "mpi_tests" / name).string();
}

}  // namespace pptrain::testing
