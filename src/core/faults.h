// Planted faults: deliberate bugs switched on at run time, so a test can show that its
// comparison rejects a wrong result (a test of the test) with the real binary, no
// separate build. They are read once from the environment,
//
//   PPTRAIN_FAULTS="NAME[@RANK][:TARGET[:VALUE]][,...]"
//   e.g. PPTRAIN_FAULTS=grad_scale@0:h.0.mlp.fc.weight:1.001,skip_tp_allreduce@1:row
//
// parsed into a plain value and handed explicitly to the code where each one acts
// (trainer, executor, layers, checkpoint loading); nothing reads the variable again.
// RANK is a world rank (default: every rank). Every active fault prints one warning line
// at startup, so a run with one is never mistaken for a clean run; an unknown name or a
// malformed entry is a one-line error. Known faults and where they act: kFaultKinds in
// faults.cpp (and docs/OPERATIONS.md, "Testing with planted faults").
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace pptrain {

struct Fault {
  std::string name;
  int rank = -1;                // world rank it acts on; -1: every rank
  std::string target;           // what it acts on (a tensor, a microbatch, ...); "" if none
  std::optional<double> value;  // e.g. a factor
  std::string text() const;     // NAME[@RANK][:TARGET[:VALUE]]
};

class Faults {
 public:
  Faults() = default;
  // Parses `spec` (the syntax above); `source` names it in errors. Throws pptrain::Error.
  static Faults parse(const std::string& spec, const std::string& source = "PPTRAIN_FAULTS");
  // PPTRAIN_FAULTS, or none when unset or empty.
  static Faults from_env();
  // The TARGET of the first fault called `name` in PPTRAIN_FAULTS, for the stand-ins read
  // at start-up, before any command parses the variable (blas_detected, cpu_topology,
  // fma_rate); nullopt when there is none, or when the variable is malformed (the command
  // reports that in one line where it reads it).
  static std::optional<std::string> stand_in_from_env(const std::string& name);

  // The faults that act on `world_rank`.
  Faults on_rank(int world_rank) const;
  // The first fault called `name`, or nullptr.
  const Fault* find(const std::string& name) const;
  std::vector<const Fault*> find_all(const std::string& name) const;
  const std::vector<Fault>& all() const { return faults_; }
  bool empty() const { return faults_.empty(); }
  // Every TENSOR and DATASET target names one of `tensors` (the model's parameter names):
  // a misspelt name would otherwise act nowhere, and the test it guards would pass for the
  // wrong reason. Throws pptrain::Error naming the entry and an example name.
  void check_tensor_names(const std::vector<std::string>& tensors, const std::string& source = "PPTRAIN_FAULTS") const;
  // One warning line per fault, printed by the rank it acts on (world rank 0 for a fault
  // on every rank).
  void announce(int world_rank) const;

 private:
  std::vector<Fault> faults_;
};

}  // namespace pptrain
