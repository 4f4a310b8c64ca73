// `pptrain inspect --verify`: the checks a resume makes of a checkpoint's contents
// (checkpoint_checks.h, the same functions), made without a job: the model comes from the
// config stored in the file.
#pragma once
#include <string>
#include <vector>

namespace pptrain {

struct VerifyReport {
  std::vector<std::string> problems;  // one line each: "checkpoint PATH: ..."
  int datasets_verified = 0;          // datasets whose type, checksum and values passed
};

// Opens `path` (one process), checks the root attributes (format, version, checksum,
// counters), parses the stored config and builds the model's list of tensors, then every
// dataset of /model (and /optim/m, /optim/v with optimizer state) as a resume would:
// a hard link under one name, IEEE float32 of the model's shape, its checksum (bound to
// its name and shape) equal to its values' (read in blocks of about 4M elements), every
// value finite, every second moment >= 0; no link the model lacks; the set of links equal
// to the root's contents_checksum. When the root or the stored config is unreadable it
// still checks whatever datasets the file holds, each against its own shape, and reports
// that too. Throws pptrain::Error only when the file cannot be opened at all.
VerifyReport verify_checkpoint_file(const std::string& path);

}  // namespace pptrain
