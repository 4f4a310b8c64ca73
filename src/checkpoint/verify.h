// `pptrain inspect --verify`: every check the reader makes of a checkpoint's contents,
// made without a model or a job, over whatever datasets the file holds.
#pragma once
#include <string>
#include <vector>

namespace pptrain {

struct VerifyReport {
  std::vector<std::string> problems;  // one line each: "checkpoint PATH: ..."
  int datasets_verified = 0;          // datasets whose type, checksum and values passed
};

// Opens `path` (one process), checks the root attributes (format, version, their
// checksum), that every link opens, that /model, /optim/m and /optim/v name the same
// tensors (with optimizer state), then every dataset: IEEE float32, rank 1 or 2, a
// `checksum` attribute equal to the hash of its values (checksum.h, read in blocks of
// about 4M elements), every value finite. Without the model it cannot tell a tensor that
// is missing from all three groups (a load can). Throws pptrain::Error only when the
// file cannot be opened at all.
VerifyReport verify_checkpoint_file(const std::string& path);

}  // namespace pptrain
