// How a weight matrix [out, in] is stored: float32, bfloat16, float16, or block-quantised.
//
// The quantised formats are llama.cpp's, byte for byte, so GGUF tensors can be used as they are:
//   q8_0: blocks of 32 values along `in`, each 34 bytes: a float16 scale d (little-endian), then
//         32 int8 q; value = d * q. d = max|x| / 127, q = round(x / d).
//   q4_0: blocks of 32 values, each 18 bytes: a float16 scale d, then 16 bytes whose low nibbles
//         are values 0..15 and high nibbles values 16..31; value = d * (nibble - 8).
//         d = m / -8 with m the value of largest magnitude (sign kept), nibble = min(15, x/d + 8.5).
// A quantised matrix is a uint8 tensor [out, in / 32, block bytes]: its rank and last size say
// the format (format_of). float32/bfloat16/float16 matrices are plain [out, in] tensors of that
// dtype. Everything here runs on CPU tensors.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace trimkv::kernels {

enum class WeightFormat { F32, BF16, F16, Q8_0, Q4_0 };

constexpr int64_t kQuantBlock = 32;      // values per quantised block
constexpr int64_t kQ8BlockBytes = 34;    // 2 + 32
constexpr int64_t kQ4BlockBytes = 18;    // 2 + 16

const char* weight_format_name(WeightFormat f);
// Bytes of one block of a quantised format (q8_0: 34, q4_0: 18).
int64_t quant_block_bytes(WeightFormat f);  // "f32", "bf16", "f16", "q8", "q4"
// Accepts f32, bf16, f16, q8 (q8_0), q4 (q4_0); throws std::invalid_argument naming the text.
WeightFormat parse_weight_format(const std::string& name);
bool is_quantized(WeightFormat f);
// Bytes one value takes on average (q8_0: 34/32, q4_0: 18/32).
double bytes_per_value(WeightFormat f);

// The format of a matrix stored as above; throws std::invalid_argument for anything else.
WeightFormat format_of(const at::Tensor& w);
int64_t weight_rows(const at::Tensor& w);  // out
int64_t weight_cols(const at::Tensor& w);  // in
int64_t weight_bytes(const at::Tensor& w); // storage bytes
// Whether `t` is a matrix stored in bf16 / f16 / q8_0 / q4_0 (float32, float64 and anything else:
// false; never throws).
bool is_low_precision(const at::Tensor& t);
// The values a tensor holds: rows x columns for a quantised matrix, its element count otherwise.
int64_t value_count(const at::Tensor& t);

// Whether a matrix with `in` columns can be stored in `f` (quantised formats need in % 32 == 0).
bool format_fits(WeightFormat f, int64_t in);
// w: [out, in] floating point -> stored in `f` (a copy; float32 input is returned as is for F32).
// Throws std::invalid_argument when !format_fits(f, in).
at::Tensor pack_weight(const at::Tensor& w, WeightFormat f);
// Any stored matrix -> float32 [out, in] (rows [r0, r1) only when given).
at::Tensor unpack_weight(const at::Tensor& w);
at::Tensor unpack_rows(const at::Tensor& w, int64_t r0, int64_t r1);
// Rows `ids` (int64 [n]) of a stored matrix as float32 [n, in]: the token-embedding lookup
// (a float64 table gives float64 rows).
at::Tensor gather_rows(const at::Tensor& w, const at::Tensor& ids);
// Any weight (matrix or vector) on `device`, contiguous: float32 and bfloat16 as they are; off the
// CPU a block-quantised matrix goes as bfloat16 (no GPU kernel reads the blocks), and so does a
// float16 one (the GPU multiplies activations in the matrix's dtype: float16 would overflow where
// bfloat16 keeps float32's range); *converted (if given) becomes true then. An undefined tensor
// stays undefined.
at::Tensor weight_on_device(const at::Tensor& w, const at::Device& device, bool* converted = nullptr);

// Raw block codecs (reference implementations, also used by the tests and the GGUF reader).
void quantize_row_q8_0(const float* x, uint8_t* blocks, int64_t n);  // n % 32 == 0
void quantize_row_q4_0(const float* x, uint8_t* blocks, int64_t n);
void dequantize_row(WeightFormat f, const void* row, float* y, int64_t n);  // any format

}  // namespace trimkv::kernels
