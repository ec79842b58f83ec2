// Import of torch.save'd state dicts (the reference's trimkv_weights.pth). The only translation
// unit that includes a torch/csrc header: torch::jit::pickle_load reads the zip container
// written by torch.save (LibTorch 1.13 and 2.x).
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iterator>

#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"

namespace trimkv {

std::map<std::string, at::Tensor> read_torch_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot open '", path, "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    TRIMKV_FAIL(Format, "'", path, "' is not a torch.save file this build can read: ", e.what());
  }
  TRIMKV_CHECK(value.isGenericDict(), Format, "'", path, "' does not hold a state dict (a dict of tensors)");
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) continue;
    at::Tensor t = entry.value().toTensor();
    TRIMKV_CHECK(t.is_floating_point(), Format, "'", path, "': tensor '", entry.key().toStringRef(),
                 "' is not floating point");
    out[entry.key().toStringRef()] = t.detach().to(at::kFloat).contiguous().clone();
  }
  return out;
}

}  // namespace trimkv
