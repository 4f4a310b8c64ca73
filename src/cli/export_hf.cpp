// pptrain export-hf CKPT DIR [--dtype fp32|bf16] [--max-shard-bytes N]: writes a
// checkpoint's weights as a Hugging Face model directory (config.json + safetensors) that
// transformers' from_pretrained loads. Runs on world rank 0 only.
#include <cstdlib>

#include "checkpoint/hf_export.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace pptrain {
namespace {

constexpr const char* kUsage =
    "export-hf: usage: pptrain export-hf CKPT.h5 DIR [--dtype fp32|bf16] [--max-shard-bytes N] (DIR new or empty)";

uint64_t positive_bytes(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 19 && text.find_first_not_of("0123456789") == std::string::npos;
  const uint64_t n = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  if (n == 0) fail("export-hf: --max-shard-bytes ", text, ": expected a positive integer (bytes)");
  return n;
}

}  // namespace

int cmd_export_hf(const Args& args) {
  std::vector<std::string> positional;
  HfExportOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--dtype" || a == "--max-shard-bytes") && i + 1 == args.size()) fail(kUsage);
    if (a == "--dtype") {
      const std::string d = args[++i];
      if (d != "fp32" && d != "bf16") fail("export-hf: --dtype ", d, ": expected fp32 or bf16");
      options.dtype = d == "fp32" ? "F32" : "BF16";
    } else if (a == "--max-shard-bytes") {
      options.max_shard_bytes = positive_bytes(args[++i]);
    } else if (a.rfind("--", 0) == 0) {
      fail(kUsage);
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) fail(kUsage);
  if (log::rank() != 0) return 0;
  const HfExportResult r = export_hf(positional[0], positional[1], options);
  std::string files;
  for (const std::string& f : r.files) files += (files.empty() ? "" : ", ") + f;
  log::info("export-hf: ", positional[0], " (step ", r.step, ", ", r.parameters, " parameters) -> ", positional[1], ": ",
            r.arch->hf_class, " as ", options.dtype, " (", files, ")");
  return 0;
}

}  // namespace pptrain
