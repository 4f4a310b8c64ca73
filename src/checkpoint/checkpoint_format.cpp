#include "checkpoint/checkpoint_format.h"

#include "checkpoint/hdf5_io.h"

namespace pptrain {

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
}

CheckpointMeta read_meta(hid_t file, const std::string& where) {
  if (!h5::has_attribute(file, "format") || h5::read_string_attribute(file, "format", where) != kCheckpointFormat)
    fail(where, ": an HDF5 file but not a pptrain checkpoint (root attribute 'format' is not '",
         kCheckpointFormat, "')");
  CheckpointMeta m;
  m.format_version = h5::read_int_attribute(file, "format_version", where);
  if (m.format_version < 1 || m.format_version > kCheckpointFormatVersion)
    fail(where, ": checkpoint format version ", m.format_version, " is not supported (this pptrain reads 1..",
         kCheckpointFormatVersion, ")");
  m.step = h5::read_int_attribute(file, "step", where);
  m.tokens_seen = h5::read_int_attribute(file, "tokens_seen", where);
  m.data_next_batch = h5::read_int_attribute(file, "data_next_batch", where);
  m.data_sequences_seen = h5::read_int_attribute(file, "data_sequences_seen", where);
  m.rng_seed = h5::read_uint_attribute(file, "rng_seed", where);
  m.rng_counter = h5::read_int_attribute(file, "rng_counter", where);
  m.config_yaml = h5::read_string_attribute(file, "config", where);
  auto layout = h5::read_int_array_attribute(file, "layout_pp_tp_dp", where);
  if (layout.size() != 3) fail(where, ": attribute 'layout_pp_tp_dp' has ", layout.size(), " values, expected 3");
  m.layout_pp = layout[0];
  m.layout_tp = layout[1];
  m.layout_dp = layout[2];
  m.has_optimizer_state = h5::read_int_attribute(file, "has_optimizer_state", where) != 0;
  m.writer = h5::has_attribute(file, "writer") ? h5::read_string_attribute(file, "writer", where) : "";
  if (m.step < 0) fail(where, ": attribute 'step' is negative (", m.step, ")");
  return m;
}

}  // namespace pptrain
