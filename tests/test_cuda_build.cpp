// The real CUDA build (`make CUDA=1`: the cuda backend's host sources compiled against the
// toolkit, every kernel (kernels/*.cu) by nvcc for sm_90, linked with cuBLAS, cuBLASLt and
// NCCL; where cuDNN is installed also cudnn_attention.cpp against the cuDNN frontend headers, linked with cuDNN,
// the GPU attention check bench/attention_check and the PTX layout test gpu-tests/test_ptx)
// compiles and links wherever nvcc is found, with or without a GPU. Without a GPU the default build leaves it
// out, so this test is what keeps it building on such machines (CI among them).
// To take well under a minute it builds in a temporary BUILD folder seeded with this
// build's library objects, so only the cuda host sources (the cuda backend and NcclComm) and
// the kernels (for one architecture) are compiled. Runs from the repository root.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// cuDNN 9 where mk/cuda.mk looks for it first (the toolkit's include/), or on Debian.
bool cudnn_found() {
  const char* home = std::getenv("CUDA_HOME");
  return fs::exists(std::string(home ? home : "/usr/local/cuda") + "/include/cudnn.h") ||
         fs::exists("/usr/include/cudnn.h") || fs::exists("/usr/include/x86_64-linux-gnu/cudnn.h");
}

bool nvcc_found() {
  return run_command("command -v nvcc", 10).exit_code == 0 || fs::exists("/usr/local/cuda/bin/nvcc") ||
         (std::getenv("CUDA_HOME") && fs::exists(std::string(std::getenv("CUDA_HOME")) + "/bin/nvcc"));
}

// The command line in `output` that writes `target` (ends with "-o TARGET" or has it inside).
std::string line_writing(const std::string& output, const std::string& target) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find("-o " + target + " ") != std::string::npos ||
        (line.size() >= target.size() + 3 && line.compare(line.size() - target.size() - 3, std::string::npos,
                                                          "-o " + target) == 0))
      return line;
  return "";
}

}  // namespace

TEST(CudaBuild, MakeCuda1CompilesAndLinksPptrainWithTheCudaBackend) {
  if (!nvcc_found()) GTEST_SKIP() << "nvcc not found: the real CUDA build cannot be built here";
  const fs::path build = fs::absolute(pptrain_bin()).parent_path();
  CommandResult version = run_command(pptrain_bin() + " --version", 30);
  if (version.output.find(" cuda") != std::string::npos)
    GTEST_SKIP() << "the build under test is the real CUDA build already";
  ASSERT_TRUE(fs::exists(build / "libpptrain.a") && fs::exists(build / "obj/src"))
      << build << " holds no library build to seed from";

  TempDir dir;
  fs::create_directories(dir.file("obj"));
  CommandResult seed = run_command("cp -a " + (build / "obj/src").string() + " " + dir.file("obj/") + " && cp -a " +
                                   (build / "libpptrain.a").string() + " " + dir.path() + "/ && rm -rf " +
                                   dir.file("obj/src/backend/cuda"),
                               60);
  // The cuda backend's objects are never seeded (a build folder that once held a CUDA=1
  // build has them): the test is that they compile.
  ASSERT_EQ(seed.exit_code, 0) << seed.output;
  // A make of its own (not the jobserver of a `make test` above), told to ignore the code
  // generation stamp: the seeded objects stand whatever ARCH they were built with.
  // With cuDNN installed, CUDNN=1 insists on it: the frontend headers missing (scripts/
  // install_deps.sh fetches them; `make test` runs it first) is a one-line make error here.
  const bool cudnn = cudnn_found();
  if (!cudnn) std::cout << "cuDNN not found: the build is checked without it\n";
  CommandResult r = run_command("env -u MAKEFLAGS -u MAKELEVEL make -j2 --no-print-directory -o " +
                                    dir.file("codegen.stamp") + " CUDA=1 CUDA_ARCH=90 CUDNN=" + (cudnn ? "1" : "0") +
                                    " BUILD=" + dir.path() + " " + dir.file("pptrain") + " " +
                                    dir.file("bench/attention_check") + " " + dir.file("gpu-tests/test_ptx"),
                                900);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(r.output.size() > 6000 ? r.output.size() - 6000 : 0);
  EXPECT_NE(r.output.find("-c src/backend/cuda/cuda_ops.cpp"), std::string::npos) << r.output;
  // No compiler warns (what -Werror would refuse): test_cuda_backend_train's syntax-only
  // check of the host sources leaves them to this build where nvcc is found.
  {
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      EXPECT_EQ(line.find("warning"), std::string::npos) << line;
  }
  EXPECT_NE(r.output.find("-lcublasLt"), std::string::npos) << r.output;
  // cudnn_attention.cpp compiled with cuDNN (not its without-cuDNN branch), its object in
  // the link of pptrain, and libcudnn in the binary.
  const std::string cudnn_obj = dir.file("obj/src/backend/cuda/cudnn_attention.o");
  const std::string link = line_writing(r.output, dir.file("pptrain"));
  EXPECT_NE(link.find(cudnn_obj), std::string::npos) << "not linked: " << cudnn_obj << "\n" << link;
  if (cudnn) {
    EXPECT_NE(r.output.find("-DPPTRAIN_WITH_CUDNN"), std::string::npos) << r.output;
    EXPECT_NE(link.find("-lcudnn"), std::string::npos) << link;
    CommandResult ldd = run_command("ldd " + dir.file("pptrain"), 30);
    EXPECT_NE(ldd.output.find("libcudnn.so"), std::string::npos) << ldd.output;
    CommandResult symbols = run_command("nm -C " + cudnn_obj + " | grep -c 'cudnnBackendExecute'", 60);
    EXPECT_NE(symbols.output, "0\n") << "the object calls no cuDNN: built without it?";
  }
  // ptxas says when it serialises warpgroup products (C7513-C7518: a wgmma issued on a
  // divergent path, registers a pending wgmma uses written by plain instructions, ...): the
  // Hopper flash kernels overlap the tensor cores with the softmax, which that would undo.
  // (The layout test's own kernels, gpu-tests/test_ptx, may be serialised: they time nothing.)
  {
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      EXPECT_FALSE(line.find("Potential Performance Loss") != std::string::npos &&
                   line.find("pptrain7kernels") != std::string::npos)
          << line;
  }
  EXPECT_TRUE(fs::exists(dir.file("bench/attention_check"))) << r.output;
  // The PTX layout test for the GPU (tests/test_emu_ptx.cpp compiled by nvcc, mk/gpu_tests.mk).
  EXPECT_TRUE(fs::exists(dir.file("gpu-tests/test_ptx"))) << r.output;
  // Every kernel compiled by nvcc for sm_90 (mk/kernels.mk's $(BUILD)/nvcc/kernels/X.o).
  int kernels = 0;
  for (const auto& e : fs::directory_iterator("kernels")) {
    if (e.path().extension() != ".cu") continue;
    ++kernels;
    const std::string object = dir.file("nvcc/kernels/" + e.path().stem().string() + ".o");
    EXPECT_TRUE(fs::exists(object) && fs::file_size(object) > 0) << e.path() << " was not compiled by nvcc";
    EXPECT_NE(r.output.find(" -c " + e.path().string() + " "), std::string::npos) << e.path() << "\n" << r.output;
  }
  // kernels/ holds over 20 kernel files; fewer than 10 means the directory was not found
  // from where the test ran (the bound the former per-kernel compile test used).
  EXPECT_GE(kernels, 10) << "run from the repository root";
  CommandResult cuda_version = run_command(dir.file("pptrain") + " --version", 30);
  EXPECT_NE(cuda_version.output.find("backends: cpu cuda"), std::string::npos) << cuda_version.output;
}

// The real-device tests (mk/gpu_tests.mk: tests/test_cuda_backend*.cpp with
// -DPPTRAIN_REAL_DEVICE, linked by `make CUDA=1 gpu-tests`) compile against the toolkit's
// headers: what only the emulator provides stays under PPTRAIN_EMULATED. Syntax only, the
// four at once: no nvcc, no link.
TEST(CudaBuild, RealDeviceTestsCompileAgainstTheCudaToolkit) {
  const std::string cuda_home = std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : "/usr/local/cuda";
  if (!fs::exists(cuda_home + "/include/cuda_runtime.h")) GTEST_SKIP() << "no CUDA toolkit under " << cuda_home;
  std::string cmd = "status=0; pids=''; ";
  for (const char* t : {"test_cuda_backend", "test_cuda_backend_bf16", "test_cuda_backend_gemm", "test_cuda_backend_model"})
    cmd += std::string("mpicxx -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter -DOMPI_SKIP_MPICXX ") +
           "-DPPTRAIN_REAL_DEVICE -DPPTRAIN_WITH_CUDA -Isrc -Ikernels -I. -Itests -I" + cuda_home + "/include tests/" + t +
           ".cpp & pids=\"$pids $!\"; ";
  cmd += "for p in $pids; do wait $p || status=1; done; exit $status";
  CommandResult r = run_command(cmd + " 2>&1", 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Planted: the emulator's fiber order used outside the guard would not compile here.
  EXPECT_EQ(r.output.find("error"), std::string::npos) << r.output;
}
