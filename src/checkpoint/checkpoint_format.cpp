#include "checkpoint/checkpoint_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"

namespace pptrain {

std::string meta_text(const CheckpointMeta& m) {
  return cat(kCheckpointFormat, "\n", m.format_version, "\n", m.step, "\n", m.tokens_seen, "\n", m.data_next_batch,
             "\n", m.data_sequences_seen, "\n", m.rng_seed, "\n", m.rng_counter, "\n", m.layout_pp, ",", m.layout_tp,
             ",", m.layout_dp, "\n", m.has_optimizer_state ? 1 : 0, "\n", m.writer, "\n", m.lineage, "\n",
             m.config_yaml, m.binds_names() ? cat("\n", m.contents_checksum, "\n", m.spike_guard) : std::string());
}

std::string contents_text(std::vector<std::string> links) {
  std::sort(links.begin(), links.end());
  std::string text;
  for (const std::string& l : links) text += l + "\n";
  return text;
}

void write_meta(hid_t file, const CheckpointMeta& m, const std::string& where) {
  using h5::write_attribute;
  write_attribute(file, "format", std::string(kCheckpointFormat), where);
  write_attribute(file, "format_version", m.format_version, where);
  write_attribute(file, "step", m.step, where);
  write_attribute(file, "tokens_seen", m.tokens_seen, where);
  write_attribute(file, "data_next_batch", m.data_next_batch, where);
  write_attribute(file, "data_sequences_seen", m.data_sequences_seen, where);
  write_attribute(file, "rng_seed", m.rng_seed, where);
  write_attribute(file, "rng_counter", m.rng_counter, where);
  write_attribute(file, "config", m.config_yaml, where);
  write_attribute(file, "layout_pp_tp_dp", std::vector<int64_t>{m.layout_pp, m.layout_tp, m.layout_dp}, where);
  write_attribute(file, "has_optimizer_state", int64_t(m.has_optimizer_state ? 1 : 0), where);
  write_attribute(file, "writer", m.writer, where);
  write_attribute(file, "lineage", m.lineage, where);
  if (m.binds_names()) {
    write_attribute(file, "spike_guard", m.spike_guard, where);
    write_attribute(file, "contents_checksum", m.contents_checksum, where);
  }
  write_attribute(file, "meta_checksum", checksum_text(meta_text(m)), where);
}

CheckpointMeta read_meta(hid_t file, const std::string& where) {
  if (!h5::has_attribute(file, "format") || !h5::has_attribute(file, "format_version"))
    fail(where, ": an HDF5 file but not a pptrain checkpoint (root attribute 'format' is not '",
         kCheckpointFormat, "')");
  CheckpointMeta m;
  m.format_version = h5::read_int_attribute(file, "format_version", where);
  if (m.format_version == 1)
    fail(where, ": checkpoint format version 1 (written by an older pptrain) has no checksums and cannot be "
         "verified; this pptrain reads version ", kCheckpointFormatVersion);
  if (h5::read_string_attribute(file, "format", where) != kCheckpointFormat)
    fail(where, ": an HDF5 file but not a pptrain checkpoint (root attribute 'format' is not '",
         kCheckpointFormat, "')");
  if (m.format_version < kOldestReadableFormatVersion || m.format_version > kCheckpointFormatVersion)
    fail(where, ": checkpoint format version ", m.format_version, " is not supported (this pptrain reads versions ",
         kOldestReadableFormatVersion, " to ", kCheckpointFormatVersion, ")");
  m.step = h5::read_int_attribute(file, "step", where);
  m.tokens_seen = h5::read_int_attribute(file, "tokens_seen", where);
  m.data_next_batch = h5::read_int_attribute(file, "data_next_batch", where);
  m.data_sequences_seen = h5::read_int_attribute(file, "data_sequences_seen", where);
  m.rng_seed = h5::read_uint_attribute(file, "rng_seed", where);
  m.rng_counter = h5::read_int_attribute(file, "rng_counter", where);
  m.config_yaml = h5::read_string_attribute(file, "config", where, h5::kMaxStringAttributeBytes);
  auto layout = h5::read_int_array_attribute(file, "layout_pp_tp_dp", 3, where);
  if (layout.size() != 3) fail(where, ": attribute 'layout_pp_tp_dp' has ", layout.size(), " values, expected 3");
  m.layout_pp = layout[0];
  m.layout_tp = layout[1];
  m.layout_dp = layout[2];
  const int64_t has_optimizer_state = h5::read_int_attribute(file, "has_optimizer_state", where);
  if (has_optimizer_state != 0 && has_optimizer_state != 1)
    fail(where, ": attribute 'has_optimizer_state' is ", has_optimizer_state, ", expected 0 or 1");
  m.has_optimizer_state = has_optimizer_state == 1;
  m.writer = h5::read_string_attribute(file, "writer", where);
  m.lineage = h5::read_string_attribute(file, "lineage", where, kMaxLineageRuns * 40);
  if (m.binds_names()) {
    m.spike_guard = h5::read_string_attribute(file, "spike_guard", where);
    m.contents_checksum = h5::read_uint_attribute(file, "contents_checksum", where);
  }
  if (h5::read_uint_attribute(file, "meta_checksum", where) != checksum_text(meta_text(m)))
    fail(where, ": the root attributes do not match their checksum (attribute 'meta_checksum'): the file is damaged");
  // The counters a resume continues from: each one a count, and every step consumed at
  // least one sequence of at least one token.
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"step", m.step}, {"tokens_seen", m.tokens_seen},
                                   {"data_next_batch", m.data_next_batch},
                                   {"data_sequences_seen", m.data_sequences_seen}, {"rng_counter", m.rng_counter}})
    if (value < 0) fail(where, ": attribute '", key, "' is negative (", value, "): impossible in a checkpoint");
  if (m.data_next_batch < m.step)
    fail(where, ": attribute 'data_next_batch' (", m.data_next_batch, ") is less than 'step' (", m.step,
         "): impossible, every step reads one batch");
  if (m.data_sequences_seen < m.step)
    fail(where, ": attribute 'data_sequences_seen' (", m.data_sequences_seen, ") is less than 'step' (", m.step,
         "): impossible, every step reads at least one sequence");
  if (m.tokens_seen < m.data_sequences_seen)
    fail(where, ": attribute 'tokens_seen' (", m.tokens_seen, ") is less than 'data_sequences_seen' (",
         m.data_sequences_seen, "): impossible, every sequence has at least one token");
  if (!m.spike_guard.empty()) {
    double mean = -1;
    long long count = -1;
    char rest = 0;
    if (std::sscanf(m.spike_guard.c_str(), "%lf %lld %c", &mean, &count, &rest) != 2 || !std::isfinite(mean) ||
        mean < 0 || count < 0)
      fail(where, ": attribute 'spike_guard' is '", m.spike_guard, "', expected a loss mean >= 0 and a count >= 0");
  }
  return m;
}

}  // namespace pptrain
