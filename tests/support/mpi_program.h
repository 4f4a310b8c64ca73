// Shared by the MPI test programs in tests/mpi/: each is its own executable, run under
// mpirun by a GoogleTest wrapper that judges its output and exit status.
//
// A program's body runs inside run_mpi_program(), which handles errors as the pptrain
// executable does: a pptrain::Error on a rank is printed ("[rank R] error: ...") and the
// whole job is aborted. MPI_EXPECT prints the failed condition with the rank and aborts
// the job with status 2, so a failed check can never look like a pass.
#pragma once
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/blas_setup.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/mpi_session.h"

#define MPI_EXPECT(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      ::pptrain::log::error("check failed at ", __FILE__, ":", __LINE__, ": ", #cond,       \
                            " " __VA_OPT__(, ) __VA_ARGS__);                                \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                         \
    }                                                                                       \
  } while (0)

namespace pptrain::mpi_test {

using Body = std::function<void(MpiSession&, const std::vector<std::string>& args)>;

inline int run_mpi_program(int argc, char** argv, const Body& body) {
  // OpenBLAS's kernels as pptrain chooses them (main.cpp): a program that trains must give
  // the bits a pptrain run gives (test_post_validation resumes pptrain's checkpoint with it).
  cpu::ensure_blas_core(argv);
  MpiSession session(&argc, &argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    body(session, args);
  } catch (const Error& e) {
    log::error(e.what());
    session.abort_job(1);
  } catch (const std::exception& e) {
    log::error("internal error: ", e.what());
    session.abort_job(3);
  }
  return 0;
}

// One line on stdout, written at once so lines of different ranks do not mix.
template <typename... A>
void say(const A&... a) {
  std::string line = cat(a..., "\n");
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace pptrain::mpi_test
