// llm.c model files (train_gpt2.c / train_gpt2.py write_model) as pptrain checkpoints.
//
// The file's layout and its reader: checkpoint/llmc_model.h.
#pragma once
#include <string>

#include "checkpoint/llmc_model.h"

namespace pptrain {

// Converts `llmc_path` into the checkpoint `out_path` (written as out_path.tmp, then
// renamed). Returns the model read.
LlmcModel import_llmc(const std::string& llmc_path, const std::string& out_path);

}  // namespace pptrain
