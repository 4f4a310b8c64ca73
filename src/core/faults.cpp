#include "core/faults.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace pptrain {
namespace {

// What a fault needs: its target's syntax ("" = takes none) and whether VALUE is required.
struct FaultKind {
  const char* name;
  const char* target;  // "" when the fault takes no target
  bool needs_value;
  const char* effect;  // for the startup warning
};

const FaultKind kFaultKinds[] = {
    {"grad_scale", "TENSOR", true,
     "multiplies this rank's gradient of the tensor by the value before the gradient reductions"},
    {"skip_tp_allreduce", "row|col", false,
     "this rank keeps its partial sum instead of the all-reduced one: row = the output of the row-parallel "
     "layers (attention and MLP projections, forward), col = the input gradient of the column-parallel layers "
     "(QKV and MLP fc, dgrad)"},
    {"skip_recompute", "", false,
     "under training.recompute this rank's blocks skip the forward they re-run at the start of I, so I reads "
     "what earlier passes left in the recompute scratch"},
    {"sync_each_action", "", false,
     "this rank's host waits for the backend after every compute action of the pipeline (as the executor once "
     "did): slower on a GPU, the same numbers"},
    {"drop_microbatch", "MICROBATCH", false,
     "this rank skips the W (weight-gradient pass) of that microbatch, losing its contribution"},
    {"skip_weight_decay", "", false, "AdamW on this rank applies no weight decay"},
    {"repeat_update", "", false, "AdamW on this rank applies every update twice"},
    {"refresh_bf16", "", false,
     "this rank re-rounds every bf16 working copy from the fp32 masters before each step (a test hook: the "
     "copies AdamW writes must equal these bit for bit, so it changes nothing)"},
    {"resume_zero", "DATASET", false,
     "after a checkpoint load this rank zeroes its part of the dataset (model/NAME, optim/m/NAME, optim/v/NAME)"},
    {"checkpoint_write_fail", "DATASET", false,
     "this rank's write of the dataset into a checkpoint fails as on a full disk (ENOSPC), after taking part in "
     "the collective transfer"},
    {"checkpoint_abandon_desync", "", false,
     "when a checkpoint write fails, this rank leaves the abandoned file's collective close out, as HDF5 does on "
     "a rank whose metadata flush fails on a full disk (the other ranks then wait in theirs)"},
    {"nan_grad", "TENSOR", true,
     "at the step given as the value (1-based) this rank's gradient of the tensor becomes NaN before the "
     "gradient reductions"},
    {"fail_at", "STEP", false,
     "this rank fails with an error at the start of that step (1-based), as a rank that hits a bug would"},
    {"checkpoint_crash", "file_created|model_written|before_rename", true,
     "this rank kills itself (SIGKILL) at that point of saving the step given as the value, as a node that dies "
     "mid-save would"},
    {"spike_update", "STEP", true,
     "multiplies the learning rate of that step (1-based) by the value, once per process: a finite loss spike "
     "at the next step"},
    {"freeze", "STEP", false, "this rank stops itself with SIGSTOP at the start of that step (1-based)"},
    {"freeze_save", "file_created|model_written|before_rename", false,
     "this rank stops itself with SIGSTOP at that point of its first checkpoint save, as a rank hung on a file "
     "system would"},
    {"zero_keep_stale", "", false,
     "under ZeRO-1 this rank takes part in the all-gather of the weights (the masters, or the bf16 copies "
     "under bf16) but keeps its own stale values outside its range"},
    {"uncounted_release", "", false,
     "the cpu backend on this rank leaves the bytes of its first release counted in use (Ops::memory_stats)"},
    {"blas_detected", "CORE", false,
     "stands in for the OpenBLAS core detected at start-up (e.g. Prescott), as on a CPU newer than the library; "
     "the start-up then chooses by the CPU's features"},
    {"cpu_topology", "DIR", false,
     "stands in for sysfs's CPU folder (/sys/devices/system/cpu) where the cpu backend counts the cores under its "
     "CPUs, e.g. a tree in which the CPUs are SMT siblings"},
    {"fma_rate", "FACTOR", false,
     "scales the FMA rate the cpu backend measures for its peak estimate (e.g. 0.5: as a core with one FMA pipe "
     "of its widest vectors)"},
    {"gemm_missing", "LIBRARY", false,
     "stands in for a GEMM library (onednn or blis) that does not load, as on a machine without it "
     "(PPTRAIN_CPU_GEMM)"},
};

const FaultKind* kind_of(const std::string& name) {
  for (const FaultKind& k : kFaultKinds)
    if (name == k.name) return &k;
  return nullptr;
}

std::string known_names() {
  std::string s;
  for (const FaultKind& k : kFaultKinds) s += cat(s.empty() ? "" : ", ", k.name);
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!s.empty() && s.back() == sep) parts.push_back("");
  return parts;
}

Fault parse_one(const std::string& entry, const std::string& source) {
  const auto fields = split(entry, ':');
  if (fields.empty() || fields.size() > 3)
    fail(source, ": fault '", entry, "' should be NAME[@RANK][:TARGET[:VALUE]]");
  Fault f;
  f.name = fields[0];
  if (auto at = f.name.find('@'); at != std::string::npos) {
    const std::string rank = f.name.substr(at + 1);
    char* end = nullptr;
    const long r = std::strtol(rank.c_str(), &end, 10);
    if (rank.empty() || *end != '\0' || r < 0)
      fail(source, ": fault '", entry, "': '@", rank, "' should be a world rank (an integer >= 0)");
    f.rank = int(r);
    f.name.resize(at);
  }
  const FaultKind* kind = kind_of(f.name);
  if (!kind) fail(source, ": unknown fault '", f.name, "' (known: ", known_names(), ")");
  if (fields.size() > 1) f.target = fields[1];
  if (fields.size() > 2) {
    char* end = nullptr;
    const double v = std::strtod(fields[2].c_str(), &end);
    if (fields[2].empty() || *end != '\0' || !std::isfinite(v))
      fail(source, ": fault '", entry, "': value '", fields[2], "' is not a number");
    f.value = v;
  }
  const bool wants_target = kind->target[0] != '\0';
  if (wants_target && f.target.empty())
    fail(source, ": fault '", entry, "' needs a target: ", f.name, ":", kind->target, kind->needs_value ? ":VALUE" : "");
  if (!wants_target && !f.target.empty()) fail(source, ": fault '", entry, "' takes no target");
  if (kind->needs_value && !f.value) fail(source, ": fault '", entry, "' needs a value: ", f.name, ":", kind->target, ":VALUE");
  if (!kind->needs_value && f.value) fail(source, ": fault '", entry, "' takes no value");
  // Targets of a fixed form are checked here; names (tensors, datasets) where they act.
  const std::string form = kind->target;
  if (form.find('|') != std::string::npos) {
    bool ok = false;
    for (const std::string& choice : split(form, '|')) ok = ok || f.target == choice;
    if (!ok) fail(source, ": fault '", entry, "': target '", f.target, "' should be ", form);
  } else if (form == "DATASET") {
    const size_t slash = f.target.rfind('/');
    const std::string section = slash == std::string::npos ? "" : f.target.substr(0, slash);
    if ((section != "model" && section != "optim/m" && section != "optim/v") || slash + 1 == f.target.size())
      fail(source, ": fault '", entry, "': target '", f.target, "' should be model/NAME, optim/m/NAME or optim/v/NAME");
  } else if (form == "STEP") {
    char* end = nullptr;
    const long step = std::strtol(f.target.c_str(), &end, 10);
    if (*end != '\0' || step < 1) fail(source, ": fault '", entry, "': target '", f.target, "' should be a step (>= 1)");
  } else if (form == "MICROBATCH") {
    char* end = nullptr;
    const long mb = std::strtol(f.target.c_str(), &end, 10);
    if (*end != '\0' || mb < 0) fail(source, ": fault '", entry, "': target '", f.target, "' should be a microbatch index");
  }
  return f;
}

}  // namespace

std::string Fault::text() const {
  std::ostringstream s;
  s << name;
  if (rank >= 0) s << '@' << rank;
  if (!target.empty() || value) s << ':' << target;
  if (value) s << ':' << *value;
  return s.str();
}

Faults Faults::parse(const std::string& spec, const std::string& source) {
  Faults out;
  if (spec.empty()) return out;
  for (const std::string& entry : split(spec, ',')) {
    if (entry.empty()) fail(source, ": empty fault in '", spec, "'");
    out.faults_.push_back(parse_one(entry, source));
  }
  return out;
}

void Faults::check_tensor_names(const std::vector<std::string>& tensors, const std::string& source) const {
  for (const Fault& f : faults_) {
    const std::string form = kind_of(f.name)->target;
    if (form != "TENSOR" && form != "DATASET") continue;
    const std::string name = form == "TENSOR" ? f.target : f.target.substr(f.target.rfind('/') + 1);
    bool known = false;
    for (const std::string& t : tensors) known = known || t == name;
    if (!known)
      fail(source, ": fault '", f.text(), "': the model has no tensor '", name, "' (its tensors are named like ",
           tensors.empty() ? std::string("h.0.mlp.fc.weight") : tensors.back(), ")");
  }
}

Faults Faults::from_env() {
  const char* spec = std::getenv("PPTRAIN_FAULTS");
  return spec ? parse(spec) : Faults{};
}

std::optional<std::string> Faults::stand_in_from_env(const std::string& name) {
  try {
    const Faults faults = from_env();
    if (const Fault* f = faults.find(name)) return f->target;
  } catch (const Error&) {
  }
  return std::nullopt;
}

Faults Faults::on_rank(int world_rank) const {
  Faults out;
  for (const Fault& f : faults_)
    if (f.rank < 0 || f.rank == world_rank) out.faults_.push_back(f);
  return out;
}

const Fault* Faults::find(const std::string& name) const {
  for (const Fault& f : faults_)
    if (f.name == name) return &f;
  return nullptr;
}

std::vector<const Fault*> Faults::find_all(const std::string& name) const {
  std::vector<const Fault*> out;
  for (const Fault& f : faults_)
    if (f.name == name) out.push_back(&f);
  return out;
}

void Faults::announce(int world_rank) const {
  for (const Fault& f : faults_)
    if (f.rank == world_rank || (f.rank < 0 && world_rank == 0))
      log::warn("planted fault ", f.text(), " is active (PPTRAIN_FAULTS): ", kind_of(f.name)->effect);
}

}  // namespace pptrain
