// pptrain import-hf DIR OUT.h5: converts a Hugging Face model directory (config.json and
// model.safetensors, or shards with model.safetensors.index.json; GPT2LMHeadModel or
// LlamaForCausalLM) into a pptrain checkpoint, so training continues in pptrain under any
// (pp, tp, dp). Runs on world rank 0 only.
#include "checkpoint/hf_import.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace pptrain {

int cmd_import_hf(const Args& args) {
  if (args.size() != 2 || args[0].rfind("--", 0) == 0 || args[1].rfind("--", 0) == 0)
    fail("import-hf: usage: pptrain import-hf DIR OUT.h5 (DIR: config.json and model.safetensors, or its shards and "
         "model.safetensors.index.json)");
  if (log::rank() != 0) return 0;
  const HfImportResult r = import_hf(args[0], args[1]);
  const ModelConfig& m = r.model;
  const std::string kv = m.llama() ? cat(" (", m.kv_heads(), " kv)") : "";
  log::info("import-hf: ", r.files, ": ", r.arch->hf_class, " (", m.n_layer, " layers, ", m.n_head, " heads", kv,
            ", d_model ", m.d_model, ", seq_len ", m.seq_len, ", vocab ", m.vocab_size, ", ", r.dtypes, ") -> ",
            args[1], ": ", r.parameters, " parameters, step 0, no optimizer state");
  log::info("import-hf: continue training with model: ", hf_model_section(m), " and checkpoint.resume=", args[1]);
  return 0;
}

}  // namespace pptrain
