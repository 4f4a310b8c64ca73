#include "checkpoint/llmc_import.h"

#include <cstring>
#include <filesystem>

#include "checkpoint/weights_checkpoint.h"

namespace pptrain {

LlmcModel import_llmc(const std::string& llmc_path, const std::string& out_path) {
  check_new_output(out_path, "import-llmc");  // before the model is read
  LlmcModel m = read_llmc_model(llmc_path);
  std::vector<WeightTensor> tensors;
  for (const NamedTensor& t : m.tensors) tensors.push_back({t.name, t.shape});
  auto values = [&](int i, float* out) {
    std::memcpy(out, m.tensors[i].values.data(), m.tensors[i].values.size() * sizeof(float));
  };
  write_weights_checkpoint(out_path, m.model, llmc_path, tensors, values,
                           "import-llmc " + std::filesystem::path(llmc_path).filename().string());
  return m;
}

}  // namespace pptrain
