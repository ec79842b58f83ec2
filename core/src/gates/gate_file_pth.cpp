// torch.save'd state dicts (the reference's trimkv_weights.pth), read and written. The only
// translation unit that includes torch/csrc headers: torch::jit::pickle_load reads the zip
// container torch.save writes; the Pickler and writeArchiveAndTensors write one (LibTorch 1.13
// and 2.x have the same calls).
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "gates/pth_check.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"

namespace trimkv {

namespace {

// LibTorch builds each tensor from the pickle's (storage offset, sizes, strides) without checking
// that the view fits its storage (the zip record): reading a corrupt file's tensor would read
// outside it (found by the gates fuzz target). Checked here before any value is read.
void check_view_within_storage(const at::Tensor& t, const std::string& path, const std::string& name) {
  const int64_t item = static_cast<int64_t>(t.element_size());
  const auto storage_bytes = static_cast<__int128>(t.storage().nbytes());
  __int128 last = t.storage_offset();  // element index of the view's last element
  bool ok = t.storage_offset() >= 0;
  for (int64_t d = 0; d < t.dim() && ok; ++d) {
    ok = t.size(d) >= 0 && t.stride(d) >= 0;
    if (ok && t.size(d) > 0) last += static_cast<__int128>(t.size(d) - 1) * t.stride(d);
  }
  ok = ok && (t.numel() == 0 || (last + 1) * item <= storage_bytes);
  TRIMKV_CHECK(ok, Format, "'", path, "': tensor '", name, "' (sizes ", t.sizes(), ", strides ", t.strides(),
               ", offset ", t.storage_offset(), ") reaches past its storage of ", t.storage().nbytes(),
               " bytes: a corrupt torch.save file");
}

}  // namespace

std::map<std::string, at::Tensor> read_torch_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot open '", path, "'");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_torch_save_file(bytes, path);  // LibTorch's reader trusts the bytes: check them first
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
    check_view_within_storage(t, path, entry.key().toStringRef());
    out[entry.key().toStringRef()] = t.detach().to(at::kFloat).contiguous().clone();
  }
  return out;
}

void write_torch_state_dict(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().contiguous());
  // What torch::jit::pickle_save does, without the type tags it puts on dicts: torch.load's
  // default (weights_only) unpickler refuses their global (torch.jit._pickle.restore_type_tag).
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&pickle](const char* b, size_t n) { pickle.insert(pickle.end(), b, b + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&bytes](const void* b, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(b), static_cast<const char*>(b) + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

}  // namespace trimkv
