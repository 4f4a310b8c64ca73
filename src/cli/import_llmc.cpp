// pptrain import-llmc MODEL.bin OUT.h5: converts an llm.c GPT-2 model file (e.g.
// gpt2_124M.bin) into a pptrain checkpoint, so training continues in pptrain under any
// (pp, tp, dp). Runs on world rank 0 only.
#include "checkpoint/llmc_import.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace pptrain {

int cmd_import_llmc(const Args& args) {
  if (args.size() != 2 || args[0].rfind("--", 0) == 0 || args[1].rfind("--", 0) == 0)
    fail("import-llmc: usage: pptrain import-llmc MODEL.bin OUT.h5 (an llm.c GPT-2 model file, version 3 or 5)");
  if (log::rank() != 0) return 0;
  const LlmcModel m = import_llmc(args[0], args[1]);
  int64_t params = 0;
  for (const NamedTensor& t : m.tensors) params += int64_t(t.values.size());
  const auto& c = m.model;
  log::info("import-llmc: ", args[0], " (", c.n_layer, " layers, ", c.n_head, " heads, d_model ", c.d_model,
            ", maxT ", c.seq_len, ", vocab ", c.vocab_size, " padded to ", m.padded_vocab, ", ",
            m.version == 3 ? "fp32" : "bf16", ") -> ", args[1], ": ", params, " parameters, step 0, no optimizer state");
  log::info("import-llmc: continue training with model: {n_layer: ", c.n_layer, ", n_head: ", c.n_head,
            ", d_model: ", c.d_model, ", seq_len: ", c.seq_len, ", vocab_size: ", c.vocab_size,
            "} and checkpoint.resume=", args[1]);
  return 0;
}

}  // namespace pptrain
