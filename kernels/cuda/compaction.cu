// Compaction on the GPU (cuda_kernels.h): kept rows gathered into a scratch buffer, then written
// to the front of each head's rows. Two launches, so no row is overwritten before it is read.
#include <cstring>

#include "cuda_common.cuh"
#include "trimkv/kernels/cuda_kernels.h"

namespace trimkv::kernels::cuda {

namespace {

using namespace detail;

// One block row of threads per kept entry; `to_scratch`: pool row keep[i] -> scratch row i, else
// scratch row i -> pool row (i - the head's first kept position).
template <typename T>
__global__ void move_rows(DeviceCompaction c, T* k_scratch, T* v_scratch, bool to_scratch) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  if (i >= c.total_kept) return;
  const int h = segment_of(c.keep_offsets, c.n_kv_head, i);  // the entry's KV head
  const int32_t* table = c.tables + c.table_offsets[h];
  const int r0 = c.first_rows ? c.first_rows[h] : 0;
  const int64_t rank = i - c.keep_offsets[h];  // where the entry goes
  const int64_t from = c.keep[i];
  // A row already in place stays: only this rank writes its position, and no other reads it.
  if (from == rank) return;
  const int64_t entry = to_scratch ? from : rank;
  const int64_t row = pool_row(table, r0, entry, c.block_size, c.head_dim);
  T* kp = static_cast<T*>(c.k_pool);
  T* vp = static_cast<T*>(c.v_pool);
  const int64_t s = i * c.head_dim;
  for (int k = threadIdx.x; k < c.head_dim; k += blockDim.x) {
    if (to_scratch) {
      k_scratch[s + k] = kp[row + k];
      v_scratch[s + k] = vp[row + k];
    } else {
      kp[row + k] = k_scratch[s + k];
      vp[row + k] = v_scratch[s + k];
    }
  }
}

template <typename T>
void launch(const DeviceCompaction& c) {
  const cudaStream_t stream = as_stream(c.stream);
  const size_t bytes = static_cast<size_t>(c.total_kept) * c.head_dim * sizeof(T);
  Scratch k(bytes, stream, "compaction: scratch"), v(bytes, stream, "compaction: scratch");
  const dim3 block(32, 8);  // 8 entries per block, a warp across each row
  const dim3 grid(static_cast<unsigned>((c.total_kept + 7) / 8));
  move_rows<T><<<grid, block, 0, stream>>>(c, k.as<T>(), v.as<T>(), true);
  check_launch("compaction (gather)");
  move_rows<T><<<grid, block, 0, stream>>>(c, k.as<T>(), v.as<T>(), false);
  check_launch("compaction (write back)");
}

}  // namespace

void compact(const DeviceCompaction& c) {
  if (c.total_kept <= 0) return;
  switch (c.dtype) {
    case KvDtype::F32: launch<float>(c); break;
    case KvDtype::BF16:
    case KvDtype::F16: launch<uint16_t>(c); break;  // rows are moved, not read: bits are bits
  }
}

int64_t blocks_after_compaction(int32_t first_row, int64_t kept, int block_size) {
  return kept == 0 ? 0 : (first_row + kept + block_size - 1) / block_size;
}

}  // namespace trimkv::kernels::cuda
