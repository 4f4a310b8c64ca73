// The relocatable GPU bundle (scripts/make_bundle.sh, `make gpu-bundle`) and the GPU check it
// ships (scripts/gpu_check.sh). The real bundle packs the CUDA=1 build, minutes of nvcc; this
// test packs the cpu build with --cpu-only --strip (`make gpu-bundle BUNDLE_CPU_ONLY=1
// BUNDLE_STRIP=1`: the binaries without debug sections), the same script and the same packing
// of Open MPI, PMIx and every library, then unpacks the tarball somewhere else (the bundle
// must be relocatable) and runs it with a clean environment whose PATH has no mpirun: ldd
// resolves every library but the C library and C++ runtime from the bundle; pptrain --version,
// prepare-data and one training step run, also under the bundle's `mpirun -np 2`, and the
// dynamic loader's log (LD_DEBUG=libs) shows every library and every dlopen'ed Open MPI / PMIx
// component came from the bundle. Runs from the repository root.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/test_util.h"

namespace pptrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;
using testing::TempDir;

// What the bundle leaves to the node (scripts/make_bundle.sh, is_system): glibc, the C++
// runtime, and libtinfo, which the node's bash (running the launcher) loads.
bool is_system_library(const std::string& name) {
  for (const char* prefix : {"linux-vdso.so", "ld-linux", "libc.so.", "libm.so.", "libpthread.so.", "libdl.so.",
                             "librt.so.", "libutil.so.", "libresolv.so.", "libstdc++.so.", "libgcc_s.so.",
                             "libtinfo.so."})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// Libraries pptrain opens with dlopen only where the node has them: oneDNN, whose matmul the cpu
// backend packs weights for (backend/cpu/packed_weights.h), and the OpenCL loader it links. A
// node without them runs without (the start-up line says `weights not packed`), so they are no
// part of the bundle.
bool is_optional_library(const std::string& name) {
  return name.rfind("libdnnl.so.", 0) == 0 || name.rfind("libOpenCL.so.", 0) == 0;
}

class GpuBundle : public ::testing::Test {
 protected:
  // Packs and unpacks once for all tests of the suite.
  static void SetUpTestSuite() {
    work_ = new TempDir;
    const std::string build = testing::build_dir();
    pack_ = run_command("scripts/make_bundle.sh --build " + build + " --out " + work_->file("pack") + " --tar " +
                            work_->file("pptrain-gpu.tar.gz") + " --cpu-only --strip 2>&1",
                        120);
    if (pack_.exit_code == 0)
      unpack_ = run_command("mkdir -p " + work_->file("elsewhere") + " && tar -C " + work_->file("elsewhere") +
                            " -xzf " + work_->file("pptrain-gpu.tar.gz") + " && rm -rf " + work_->file("pack") + " 2>&1");
    // A PATH with only what the launcher needs: no mpirun, no ssh.
    fs::create_directories(work_->file("bin"));
    for (const char* tool : {"bash", "dirname", "env"}) {
      const CommandResult where = run_command(std::string("command -v ") + tool);
      std::string path = where.output.substr(0, where.output.find('\n'));
      fs::create_symlink(path, work_->file("bin") + "/" + tool);
    }
  }
  static void TearDownTestSuite() {
    delete work_;
    work_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(pack_.exit_code, 0) << pack_.output;
    ASSERT_EQ(unpack_.exit_code, 0) << unpack_.output;
  }

  static std::string bundle() { return work_->file("elsewhere/pptrain-gpu"); }
  // `command` under env -i with the bundle's launcher: PATH only work/bin (no mpirun).
  static CommandResult in_bundle(const std::string& command, const std::string& env = "", int timeout_s = 60) {
    return run_command("cd " + work_->path() + " && env -i HOME=" + work_->path() + " PATH=" + work_->file("bin") +
                           " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " + env + " " +
                           bundle() + "/run " + command + " 2>&1",
                       timeout_s);
  }
  // Every library the loader initialised in the runs logged to `dir` (LD_DEBUG_OUTPUT).
  static std::set<std::string> loaded_libraries(const std::string& dir) {
    CommandResult r = run_command("cat " + dir + "/ld.* | sed -n 's/.*calling init: //p' | sort -u");
    std::set<std::string> libs;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) libs.insert(line);
    return libs;
  }
  // Checks that every library of `libs` is in the bundle, the node's C library / C++ runtime
  // or an optional one, and that each of `from_bundle` (name prefixes) was loaded from the
  // bundle.
  static void expect_from_bundle(const std::set<std::string>& libs, const std::vector<std::string>& from_bundle) {
    for (const std::string& path : libs) {
      const std::string name = fs::path(path).filename().string();
      if (path.rfind(bundle() + "/", 0) != 0) {
        EXPECT_TRUE(is_system_library(name) || is_optional_library(name)) << path << " is not from the bundle";
      }
    }
    for (const std::string& want : from_bundle) {
      bool found = false;
      for (const std::string& path : libs)
        found |= path.rfind(bundle() + "/", 0) == 0 && fs::path(path).filename().string().rfind(want, 0) == 0;
      EXPECT_TRUE(found) << want << "* was not loaded from the bundle";
    }
  }

  static TempDir* work_;
  static CommandResult pack_, unpack_;
};

TempDir* GpuBundle::work_ = nullptr;
CommandResult GpuBundle::pack_{-1, ""}, GpuBundle::unpack_{-1, ""};

TEST_F(GpuBundle, HoldsTheBinariesOpenMpiRuntimeScriptsAndConfigs) {
  for (const char* f : {"run", "bin/pptrain", "bin/mpirun", "bin/orted", "build/pptrain", "build/bench/gpu_model",
                        "build/bench/model_flops", "lib/libmpi.so.40", "lib/libhdf5_openmpi.so.103", "lib/libopenblas.so.0",
                        "lib/libpmix.so.2", "share/openmpi/help-mpi-api.txt", "configs/gpt2_124m_gpu.yaml",
                        "configs/gpt2_1558m_t4096.yaml", "scripts/gpu_check.sh", "scripts/bench_gpu.sh",
                        "scripts/bench_planner.sh", "bench/cuda/train_throughput.sh", "MANIFEST"})
    EXPECT_TRUE(fs::exists(bundle() + "/" + f)) << f;
  int components = 0;
  for (const auto& e : fs::directory_iterator(bundle() + "/lib/openmpi")) components += e.path().extension() == ".so";
  EXPECT_GT(components, 20) << "Open MPI's MCA components (dlopen'ed) are missing";
  // The C library and the C++ runtime stay the node's.
  for (const auto& e : fs::directory_iterator(bundle() + "/lib"))
    EXPECT_FALSE(is_system_library(e.path().filename().string())) << e.path();
}

// --strip (what fits a bundle through a narrow copy): the project's binaries lose their
// debug sections, the build's keep theirs, and the stripped ones run (the tests below).
TEST_F(GpuBundle, StripDropsTheDebugSectionsOfTheProjectsBinaries) {
  const std::string build = testing::build_dir();
  auto debug_sections = [](const std::string& file) {
    return run_command("readelf -S " + file + " | grep -c '\\.debug_info'").output;
  };
  EXPECT_EQ(debug_sections(build + "/pptrain"), "1\n") << "the build was not compiled with -g";
  EXPECT_EQ(debug_sections(bundle() + "/build/pptrain"), "0\n");
  EXPECT_EQ(debug_sections(bundle() + "/build/bench/model_flops"), "0\n");
  // Half: a -g build's pptrain is mostly debug sections (64 MB against 3.5 MB stripped, -O3).
  EXPECT_LT(fs::file_size(bundle() + "/build/pptrain"), fs::file_size(build + "/pptrain") / 2);
}

TEST_F(GpuBundle, LddResolvesEveryOtherLibraryFromTheBundle) {
  CommandResult r = run_command("cd " + bundle() + " && for f in build/pptrain build/bench/* bin/mpirun bin/orted "
                                "lib/openmpi/*.so pmix/lib/pmix/*.so; do echo \"== $f\"; env -i LD_LIBRARY_PATH=" +
                                bundle() + "/lib:" + bundle() + "/lib/cuda ldd $f; done 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  std::string file;
  int resolved = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("== ", 0) == 0) {
      file = line.substr(3);
      continue;
    }
    std::istringstream words(line);
    std::string name, arrow, path;
    words >> name >> arrow >> path;
    if (arrow != "=>") continue;
    if (is_system_library(name)) continue;
    ++resolved;
    EXPECT_EQ(path.rfind(bundle() + "/", 0), 0u) << file << " needs " << name << " from " << path;
  }
  EXPECT_GT(resolved, 100) << r.output;
}

TEST_F(GpuBundle, TrainsFromTheBundleAloneAlsoUnderItsMpirun) {
  CommandResult v = in_bundle("pptrain --version");
  ASSERT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("pptrain "), std::string::npos) << v.output;
  CommandResult which = in_bundle("bash -c 'command -v mpirun'");
  EXPECT_EQ(which.output, bundle() + "/bin/mpirun\n");

  const std::string data = work_->file("data");
  CommandResult prep = in_bundle("pptrain prepare-data --markov --vocab 19 --tokens 5000 --out " + data);
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  testing::write_file(work_->file("tiny.yaml"),
                      "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
                      "parallel: {microbatches: 2}\n"
                      "training: {steps: 1, micro_batch_size: 2, warmup_steps: 0, eval_every: 0}\n"
                      "data: {train: '" + data + "/train_*.bin'}\n"
                      "logging: {every: 1, sample_tokens: 0}\n");
  for (const std::string& launch : {std::string("pptrain"), std::string("mpirun -np 2 --oversubscribe pptrain")}) {
    SCOPED_TRACE(launch);
    const std::string log = work_->file(launch.size() > 8 ? "ld_mpirun" : "ld_single");
    fs::create_directories(log);
    CommandResult r = in_bundle(launch + " train " + work_->file("tiny.yaml") + (launch.size() > 8 ? " parallel.dp=2" : ""),
                                "LD_DEBUG=libs LD_DEBUG_OUTPUT=" + log + "/ld");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("step 1/1 | loss"), std::string::npos) << r.output;
    std::vector<std::string> want = {"libmpi.so", "libhdf5_openmpi.so", "libyaml-cpp.so", "libopenblas.so",
                                     "libgomp.so", "libgfortran.so"};
    if (launch.size() > 8) {  // mpirun, and the components it and the ranks dlopen
      EXPECT_NE(r.output.find("dp 2"), std::string::npos) << r.output;
      for (const char* c : {"libopen-rte.so", "libpmix.so", "mca_plm_", "mca_btl_", "mca_pml_", "pmix_mca_"})
        want.push_back(c);
    }
    expect_from_bundle(loaded_libraries(log), want);
  }
}

TEST_F(GpuBundle, GpuCheckSkipsWithOneLineWhereThereIsNoGpu) {
  CommandResult r = in_bundle("scripts/gpu_check.sh");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "{\"check\": \"gpu_check\", \"skipped\": \"nvidia-smi not found (no NVIDIA driver on this "
                      "machine)\"}\n");
}

// scripts/gpu_session.sh, the one call a short GPU visit makes, on the packed bundle where
// there is no GPU (no nvidia-smi on its PATH): it unpacks the bundle into a folder of its
// own, runs each part asked for (gpu_check's skip line; the attention part finds no device
// binaries in a cpu-only bundle; an unknown part is named), keeps the logs, prints the table
// last and leaves no unpacked bundle behind; with its time budget spent, it starts no part.
TEST_F(GpuBundle, GpuSessionRunsItsPartsAndPrintsItsTableWithoutAGpu) {
  TempDir dir;
  fs::create_directories(dir.file("bin"));
  fs::create_directories(dir.file("tmp"));
  for (const char* tool : {"bash", "dirname", "env", "tar", "gzip", "mktemp", "realpath", "date", "grep", "sed",
                           "cut", "tr", "head", "tail", "rm", "mkdir", "timeout", "tee", "cat", "uname", "ldd"}) {
    const CommandResult where = run_command(std::string("command -v ") + tool);
    if (where.exit_code == 0)
      fs::create_symlink(where.output.substr(0, where.output.find('\n')), dir.file("bin") + "/" + tool);
  }
  const CommandResult r =
      run_command("env -i HOME=" + dir.path() + " PATH=" + dir.file("bin") + " TMPDIR=" + dir.file("tmp") +
                      " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " +
                      "scripts/gpu_session.sh " + work_->file("pptrain-gpu.tar.gz") + " " + dir.file("out") +
                      " check attention bogus 2>&1",
                  120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pptrain 0."), std::string::npos) << "the bundle's pptrain --version:\n" << r.output;
  EXPECT_NE(r.output.find("gpu_session: unknown part 'bogus'"), std::string::npos) << r.output;
  const size_t summary = r.output.find("---- summary");
  ASSERT_NE(summary, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0 ok, 0 failed lines in gpu_check.jsonl", summary), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test_ptx: ", summary), std::string::npos) << r.output;
  CommandResult check = run_command("cat " + dir.file("out/gpu_check.jsonl"));
  EXPECT_NE(check.output.find("\"skipped\": \"nvidia-smi not found"), std::string::npos) << check.output;
  EXPECT_TRUE(fs::is_empty(dir.file("tmp"))) << "the unpacked bundle was left in " << dir.file("tmp");

  // With its time spent (GPU_SESSION_BUDGET_S), parts still to come are listed, not started.
  const CommandResult spent =
      run_command("env -i HOME=" + dir.path() + " PATH=" + dir.file("bin") + " TMPDIR=" + dir.file("tmp") +
                      " GPU_SESSION_BUDGET_S=0 scripts/gpu_session.sh " + work_->file("pptrain-gpu.tar.gz") + " " +
                      dir.file("out2") + " check attention 2>&1",
                  120);
  EXPECT_EQ(spent.exit_code, 0) << spent.output;
  EXPECT_NE(spent.output.find("check: not started (GPU_SESSION_BUDGET_S=0 spent"), std::string::npos) << spent.output;
  EXPECT_NE(spent.output.find("attention: not started"), std::string::npos) << spent.output;
  EXPECT_FALSE(fs::exists(dir.file("out2/gpu_check.jsonl"))) << spent.output;
}

TEST(GpuCheck, SkipsWhenNvidiaSmiListsNoGpu) {
  TempDir dir;
  fs::create_directories(dir.file("bin"));
  testing::write_file(dir.file("bin/nvidia-smi"), "#!/bin/sh\necho 'No devices were found'\nexit 6\n");
  fs::permissions(dir.file("bin/nvidia-smi"), fs::perms::owner_all);
  CommandResult r = run_command("PATH=" + dir.file("bin") + ":$PATH scripts/gpu_check.sh 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "{\"check\": \"gpu_check\", \"skipped\": \"nvidia-smi -L lists no GPU\"}\n");
}

// The whole check on the emulated cuda backend: pptrain-emu stands in for the real pptrain
// (its `device: cuda` runs the cuda backend's host code and kernels on the CPU, its NCCL is
// carried by MPI), a stand-in nvidia-smi lists two H100s, and two stand-in device tests pass
// and fail. Each check is one JSON line; the failed test fails the check (exit 1).
TEST(GpuCheck, ReportsEveryCheckAsOneJsonLineOnTheEmulatedBackend) {
  TempDir dir;
  const fs::path build = fs::absolute(testing::pptrain_bin()).parent_path();
  ASSERT_TRUE(fs::exists(testing::pptrain_emu_bin())) << testing::pptrain_emu_bin() << " not built";
  fs::create_directories(dir.file("bin"));
  fs::create_directories(dir.file("b/bench"));
  fs::create_directories(dir.file("b/gpu-tests"));
  testing::write_file(dir.file("bin/nvidia-smi"),
                      "#!/bin/sh\ncase \"$*\" in\n"
                      "  *-L*) echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'; echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)' ;;\n"
                      "  *driver*) echo 580.65 ;;\n  *name*) echo 'NVIDIA H100 80GB HBM3' ;;\nesac\n");
  testing::write_file(dir.file("b/gpu-tests/test_pass"),
                      "#!/bin/sh\necho 'zbv: worst diff/bound 0.0116: h.0.ln_1.weight gradient'\n"
                      "echo '[  PASSED  ] 3 tests.'\n");
  testing::write_file(dir.file("b/gpu-tests/test_fail"),
                      "#!/bin/sh\necho 'x.cpp:1: Failure'\necho '[  FAILED  ] Suite.Name (1 ms)'\n"
                      "echo '[  FAILED  ] 1 test, listed below:'\necho '[  FAILED  ] Suite.Name'\nexit 1\n");
  for (const char* f : {"bin/nvidia-smi", "b/gpu-tests/test_pass", "b/gpu-tests/test_fail"})
    fs::permissions(dir.file(f), fs::perms::owner_all);
  fs::create_symlink(fs::absolute(testing::pptrain_emu_bin()), dir.file("b/pptrain"));
  for (const char* b : {"gpu_model", "model_flops"}) fs::create_symlink(build / "bench" / b, dir.file("b/bench/") + b);

  CommandResult r = run_command("PATH=" + dir.file("bin") + ":$PATH OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 "
                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
                                "scripts/gpu_check.sh " + dir.file("b") + " 2>&1",
                                300);
  EXPECT_EQ(r.exit_code, 1) << r.output;  // test_fail failed
  std::map<std::string, std::string> lines;  // check (binary for device_tests) -> line
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    std::smatch check, binary;
    ASSERT_TRUE(std::regex_search(line, check, std::regex("^\\{\"check\": \"([a-z0-9_]+)\"")))
        << "not a check line: " << line << "\n" << r.output;
    std::string key = check[1];
    if (std::regex_search(line, binary, std::regex("\"binary\": \"([^\"]+)\""))) key.append(":").append(binary[1].str());
    lines[key] = line;
  }
  EXPECT_NE(lines["device"].find("\"gpus\": 2, \"name\": \"NVIDIA H100 80GB HBM3\""), std::string::npos) << r.output;
  EXPECT_NE(lines["device_tests:test_pass"].find("\"ok\": true, \"exit\": 0, \"passed\": 3"), std::string::npos)
      << r.output;
  EXPECT_NE(lines["device_tests:test_fail"].find("\"ok\": false, \"exit\": 1, \"passed\": 0, \"failed\": \"Suite.Name\""),
            std::string::npos)
      << r.output;
  // What a device test prints beside GoogleTest's lines: its measured differences.
  EXPECT_NE(lines["device_tests_detail:test_pass"].find("\"line\": \"zbv: worst diff/bound 0.0116: "), std::string::npos)
      << r.output;
  EXPECT_NE(lines["attention"].find("attention_check is not in this build"), std::string::npos) << r.output;
  // pp 2 ZB-V, 3 steps: 4 stages x 4 microbatches x F, I, W = 48 actions and 4 x 8 transfer
  // slices a step; two (stand-in) GPUs: a GPU each, over NCCL.
  EXPECT_NE(lines["trace"].find("\"ok\": true, \"exit\": 0, \"layout\": \"pp 2 zbv, 3 steps\", \"action_slices\": 144, "
                                "\"transfer_slices\": 96, \"comm\": \"comm nccl\""),
            std::string::npos)
      << r.output;
  // bf16 on the emulated cuda backend learns the Markov source as fp32 on the cpu backend
  // does (the check's 80 steps of a 1-layer model; only here, not again in
  // test_cuda_backend_train_bf16): both within 10% of the source's entropy (the best any
  // model can do; ln 16 = 2.77 at the start), bf16 within 2% of fp32. These are statements
  // about the outcome of training, not rounding bounds: after 80 AdamW steps two
  // trajectories differ by far more than rounding, yet both approach the same minimum, where
  // the validation loss is first-order flat in the parameters, so rounding anywhere (another
  // CPU, bf16 itself) moves it by far less than the margins.
  {
    const std::string& learning = lines["bf16_learning"];
    EXPECT_NE(learning.find("\"ok\": true"), std::string::npos) << r.output;
    const double bf16 = testing::json_number(learning, "val_loss_bf16_cuda"),
                 fp32 = testing::json_number(learning, "val_loss_fp32_cpu"),
                 entropy = testing::json_number(learning, "entropy");
    ASSERT_GT(entropy, 0) << learning;
    EXPECT_LT(fp32, 1.10 * entropy) << learning;
    EXPECT_LT(bf16, 1.10 * entropy) << learning;
    EXPECT_NEAR(bf16, fp32, 0.02 * fp32) << learning;
    std::cout << "val loss fp32 " << fp32 << ", bf16 " << bf16 << ", entropy " << entropy << "\n";
  }
  EXPECT_NE(lines["nccl"].find("\"ok\": true, \"ranks\": 2"), std::string::npos) << r.output;
  EXPECT_NE(lines["nccl"].find("comm nccl"), std::string::npos) << r.output;
  EXPECT_NE(lines["bench"].find("\"skipped\": "), std::string::npos) << r.output;
  EXPECT_NE(lines["model_vs_measured"].find("\"predicted_mfu\": 0."), std::string::npos) << r.output;
}

TEST(GpuBundleMake, TheMakeTargetRunsTheSamePackingScript) {
  const std::string build = testing::build_dir();
  // -n: what `make gpu-bundle` would run, without running it; -o: the build is current.
  CommandResult cpu = run_command("env -u MAKEFLAGS -u MAKELEVEL make -n --no-print-directory BUILD=" + build +
                                  " BUNDLE_CPU_ONLY=1 -o bundle-binaries gpu-bundle 2>&1");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("scripts/make_bundle.sh --build " + build + " --out " + build + "/gpu-bundle --tar " + build +
                            "/pptrain-gpu.tar.gz --cpu-only"),
            std::string::npos)
      << cpu.output;
  EXPECT_EQ(cpu.output.find("--strip"), std::string::npos) << cpu.output;
  CommandResult stripped = run_command("env -u MAKEFLAGS -u MAKELEVEL make -n --no-print-directory BUILD=" + build +
                                       " BUNDLE_CPU_ONLY=1 BUNDLE_STRIP=1 -o bundle-binaries gpu-bundle 2>&1");
  ASSERT_EQ(stripped.exit_code, 0) << stripped.output;
  EXPECT_NE(stripped.output.find(" --strip\n"), std::string::npos) << stripped.output;
}

}  // namespace
}  // namespace pptrain
