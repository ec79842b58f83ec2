// A data-parallel process group over LibTorch's c10d (Gloo: CPU tensors), for gate training:
// the rendezvous of the ranks and the sums of their gradients and statistics.
//
// Gloo's ring reductions hand every rank the same bits, so ranks that start equal and apply the
// same optimiser to the summed gradients stay equal without further exchange. A rank that dies
// closes its sockets: the others' next collective fails at once with Error{Io} naming the
// operation (a rank that hangs is caught by the timeout instead).
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "trimkv/core/train_gates.h"

namespace trimkv {

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice), for ranks started
// on one machine. Error{Io} when no socket can be bound.
int free_local_port();

// Whether this build has c10d with Gloo (LibTorch's headers and Gloo's found at configure time).
bool data_parallel_available();

class DataParallelGroup {
 public:
  // Joins the group described by `options` (world_size >= 2): rank 0 serves a TCP store at
  // master_addr:master_port, every rank connects to it and then to each other. Errors:
  // Error{Input} for a bad rank / size / port, Error{Unsupported} when the build has no Gloo,
  // Error{Io} when the address cannot be served or reached or the peers do not all arrive within
  // the timeout.
  explicit DataParallelGroup(const DataParallelOptions& options);
  ~DataParallelGroup();
  DataParallelGroup(const DataParallelGroup&) = delete;
  DataParallelGroup& operator=(const DataParallelGroup&) = delete;

  int rank() const;
  int size() const;

  // Sums `tensors` (CPU, one dtype, any shapes) over the ranks, in place, as one flat message.
  // `what` names the operation in errors ("step 12's gradients").
  void all_reduce_sum(const std::vector<at::Tensor>& tensors, const std::string& what);
  // Whether `flag` is set on any rank.
  bool any(bool flag, const std::string& what);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace trimkv
