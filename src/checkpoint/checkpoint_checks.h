// The checks of a checkpoint's contents that a resume (checkpoint_reader.cpp) and
// `pptrain inspect --verify` (verify.cpp) share: one implementation, so a file that
// verifies is a file that resumes (except for a model that differs from the job's, which
// only a resume can know). Each returns "" when the check passes, else one line naming
// the file and the dataset.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checksum.h"
#include "checkpoint/tensor_table.h"
#include "core/config.h"

namespace pptrain {

// Before any value is read: `name` ("/model/wte.weight") is a hard link to a dataset
// that no other name links to, of IEEE float32 of shape `expected`, with a `checksum`
// attribute, which is stored in `*checksum`.
std::string check_dataset_header(hid_t file, const std::string& name, const std::vector<int64_t>& expected,
                                 const std::string& path, uint64_t* checksum);

// The group of `section` exists as a hard link, and holds no link but `names`.
std::string check_group_members(hid_t file, Section section, const std::vector<std::string>& names,
                                const std::string& path);

// Version 3: the paths of every link in the file against the root's contents_checksum.
std::string check_contents(hid_t file, const CheckpointMeta& meta, const std::string& path);

// After the values are read: their element sum (checksum.h, over the whole dataset)
// plus the version's binding against the stored checksum.
std::string check_checksum(const std::string& name, const std::vector<int64_t>& shape, uint64_t element_sum,
                           uint64_t stored, const CheckpointMeta& meta, const std::string& path);

// Every value finite, and second moments >= 0 (`digest` of the values one rank read).
std::string check_values(const std::string& name, Section section, const SlabDigest& digest,
                         const std::string& path);

// The datasets of a file written for `model` (pptrain's names and global shapes, as the
// model's parameters are built), for a check without a job. Throws pptrain::Error for an
// arch pptrain does not build.
std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_tensors(const ModelConfig& model,
                                                                             const std::string& where);

}  // namespace pptrain
