// Weight storage formats (weight_format.h): names, packing, unpacking, row gathers.
#include "trimkv/kernels/weight_format.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "gemv_lowp.h"

namespace trimkv::kernels {

namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

inline uint16_t to_half_bits(float v) { return c10::Half(v).x; }
inline float from_half_bits(uint16_t b) { return static_cast<float>(c10::Half(b, c10::Half::from_bits())); }

}  // namespace

int64_t quant_block_bytes(WeightFormat f) { return f == WeightFormat::Q8_0 ? kQ8BlockBytes : kQ4BlockBytes; }

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::F16: return "f16";
    case WeightFormat::Q8_0: return "q8";
    case WeightFormat::Q4_0: return "q4";
  }
  return "?";
}

WeightFormat parse_weight_format(const std::string& name) {
  if (name == "f32" || name == "float32") return WeightFormat::F32;
  if (name == "bf16" || name == "bfloat16") return WeightFormat::BF16;
  if (name == "f16" || name == "float16") return WeightFormat::F16;
  if (name == "q8" || name == "q8_0") return WeightFormat::Q8_0;
  if (name == "q4" || name == "q4_0") return WeightFormat::Q4_0;
  fail("unknown weight format '" + name + "' (expected f32, bf16, f16, q8 or q4)");
}

bool is_quantized(WeightFormat f) { return f == WeightFormat::Q8_0 || f == WeightFormat::Q4_0; }

double bytes_per_value(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return 4;
    case WeightFormat::BF16:
    case WeightFormat::F16: return 2;
    case WeightFormat::Q8_0: return static_cast<double>(kQ8BlockBytes) / kQuantBlock;
    case WeightFormat::Q4_0: return static_cast<double>(kQ4BlockBytes) / kQuantBlock;
  }
  return 4;
}

WeightFormat format_of(const at::Tensor& w) {
  if (!w.defined()) fail("format_of: undefined tensor");
  if (w.dim() == 2) {
    switch (w.scalar_type()) {
      case at::kFloat: return WeightFormat::F32;
      case at::kBFloat16: return WeightFormat::BF16;
      case at::kHalf: return WeightFormat::F16;
      default: break;
    }
  } else if (w.dim() == 3 && w.scalar_type() == at::kByte) {
    if (w.size(2) == kQ8BlockBytes) return WeightFormat::Q8_0;
    if (w.size(2) == kQ4BlockBytes) return WeightFormat::Q4_0;
  }
  fail("not a stored weight matrix: " + std::string(c10::toString(w.scalar_type())) + " tensor of rank " +
       std::to_string(w.dim()));
}

int64_t weight_rows(const at::Tensor& w) { return w.size(0); }
int64_t weight_cols(const at::Tensor& w) {
  return is_quantized(format_of(w)) ? w.size(1) * kQuantBlock : w.size(1);
}
int64_t weight_bytes(const at::Tensor& w) { return w.numel() * static_cast<int64_t>(w.element_size()); }

bool is_low_precision(const at::Tensor& t) {
  if (!t.defined()) return false;
  if (t.dim() == 2) return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
  return t.dim() == 3 && t.scalar_type() == at::kByte && (t.size(2) == kQ8BlockBytes || t.size(2) == kQ4BlockBytes);
}

int64_t value_count(const at::Tensor& t) {
  if (!t.defined()) return 0;
  return is_low_precision(t) ? weight_rows(t) * weight_cols(t) : t.numel();
}

bool format_fits(WeightFormat f, int64_t in) { return !is_quantized(f) || (in > 0 && in % kQuantBlock == 0); }

void quantize_row_q8_0(const float* x, uint8_t* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b, x += kQuantBlock, blocks += kQ8BlockBytes) {
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = to_half_bits(d);
    std::memcpy(blocks, &dh, 2);
    auto* q = reinterpret_cast<int8_t*>(blocks + 2);
    for (int64_t j = 0; j < kQuantBlock; ++j) q[j] = static_cast<int8_t>(std::lround(x[j] * id));
  }
}

void quantize_row_q4_0(const float* x, uint8_t* blocks, int64_t n) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b, x += kQuantBlock, blocks += kQ4BlockBytes) {
    float amax = 0.0f, m = 0.0f;
    for (int64_t j = 0; j < kQuantBlock; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        m = x[j];
      }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = to_half_bits(d);
    std::memcpy(blocks, &dh, 2);
    uint8_t* q = blocks + 2;
    for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
      const auto lo = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x[j] * id + 8.5f)));
      const auto hi = static_cast<uint8_t>(std::min<int>(15, static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      q[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row(WeightFormat f, const void* row, float* y, int64_t n) {
  switch (f) {
    case WeightFormat::F32: std::memcpy(y, row, static_cast<size_t>(n) * 4); return;
    case WeightFormat::BF16:
    case WeightFormat::F16:
      widen_row_16bit(static_cast<const uint16_t*>(row), y, n, f == WeightFormat::BF16);
      return;
    case WeightFormat::Q8_0: {
      const auto* blk = static_cast<const uint8_t*>(row);
      for (int64_t b = 0; b < n / kQuantBlock; ++b, blk += kQ8BlockBytes, y += kQuantBlock) {
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float d = from_half_bits(dh);
        const auto* q = reinterpret_cast<const int8_t*>(blk + 2);
        for (int64_t j = 0; j < kQuantBlock; ++j) y[j] = d * static_cast<float>(q[j]);
      }
      return;
    }
    case WeightFormat::Q4_0: {
      const auto* blk = static_cast<const uint8_t*>(row);
      for (int64_t b = 0; b < n / kQuantBlock; ++b, blk += kQ4BlockBytes, y += kQuantBlock) {
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float d = from_half_bits(dh);
        const uint8_t* q = blk + 2;
        for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
          y[j] = d * static_cast<float>((q[j] & 0x0F) - 8);
          y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
        }
      }
      return;
    }
  }
}

at::Tensor pack_weight(const at::Tensor& w, WeightFormat f) {
  if (w.dim() != 2 || !w.is_floating_point()) fail("pack_weight: expected a 2-D floating-point matrix");
  const int64_t out = w.size(0), in = w.size(1);
  switch (f) {
    case WeightFormat::F32: return w.scalar_type() == at::kFloat ? w.contiguous() : w.to(at::kFloat).contiguous();
    case WeightFormat::BF16: return w.to(at::kBFloat16).contiguous();
    case WeightFormat::F16: return w.to(at::kHalf).contiguous();
    case WeightFormat::Q8_0:
    case WeightFormat::Q4_0: break;
  }
  if (!format_fits(f, in))
    fail(std::string("a ") + weight_format_name(f) + " matrix needs a width divisible by 32, this one is " +
         std::to_string(in) + " wide");
  const at::Tensor src = w.to(at::kFloat).contiguous();
  const int64_t bb = quant_block_bytes(f), nb = in / kQuantBlock;
  at::Tensor packed = at::empty({out, nb, bb}, at::kByte);
  const float* s = src.data_ptr<float>();
  uint8_t* d = packed.data_ptr<uint8_t>();
  at::parallel_for(0, out, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (f == WeightFormat::Q8_0) quantize_row_q8_0(s + r * in, d + r * nb * bb, in);
      else quantize_row_q4_0(s + r * in, d + r * nb * bb, in);
    }
  });
  return packed;
}

at::Tensor unpack_rows(const at::Tensor& w, int64_t r0, int64_t r1) {
  const WeightFormat f = format_of(w);
  if (f == WeightFormat::F32) return w.narrow(0, r0, r1 - r0);
  const int64_t in = weight_cols(w);
  at::Tensor wc = w.is_contiguous() ? w : w.contiguous();
  at::Tensor y = at::empty({r1 - r0, in}, at::kFloat);
  const int64_t row_bytes = weight_bytes(wc) / std::max<int64_t>(1, wc.size(0));
  const auto* base = static_cast<const uint8_t*>(wc.data_ptr());
  float* out = y.data_ptr<float>();
  at::parallel_for(r0, r1, 16, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) dequantize_row(f, base + r * row_bytes, out + (r - r0) * in, in);
  });
  return y;
}

at::Tensor unpack_weight(const at::Tensor& w) { return unpack_rows(w, 0, w.size(0)); }

at::Tensor weight_on_device(const at::Tensor& w, const at::Device& device, bool* converted) {
  if (!w.defined() || w.device() == device) return w;
  at::Tensor held = w;
  if (!device.is_cpu() && is_low_precision(w) && (is_quantized(format_of(w)) || w.scalar_type() == at::kHalf)) {
    held = unpack_weight(w).to(at::kBFloat16);
    if (converted) *converted = true;
  }
  return held.to(device).contiguous();
}

at::Tensor gather_rows(const at::Tensor& w, const at::Tensor& ids) {
  const at::Tensor idx = ids.to(at::kLong).contiguous();
  if (!is_low_precision(w)) return at::embedding(w, idx);  // float32 (or float64 in gradient checks) as it is
  const WeightFormat f = format_of(w);
  if (!is_quantized(f)) return at::embedding(w, idx).to(at::kFloat);
  at::Tensor rows = w.index_select(0, idx.view({-1})).contiguous();
  return unpack_weight(rows).view([&] {
    std::vector<int64_t> s(idx.sizes().begin(), idx.sizes().end());
    s.push_back(weight_cols(w));
    return s;
  }());
}

}  // namespace trimkv::kernels
