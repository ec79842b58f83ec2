// DataParallelGroup on c10d's TCPStore + ProcessGroupGloo (data_parallel.h).
#include "trimkv/core/data_parallel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>

#include "trimkv/core/error.h"

#if TRIMKV_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace trimkv {

bool data_parallel_available() { return TRIMKV_HAVE_GLOO != 0; }

namespace {

void validate(const DataParallelOptions& o) {
  TRIMKV_CHECK(o.world_size >= 2, Input, "a data-parallel group needs at least 2 ranks, got ", o.world_size);
  TRIMKV_CHECK(o.rank >= 0 && o.rank < o.world_size, Input, "rank ", o.rank, " is outside 0..",
               o.world_size - 1, " (RANK must be below WORLD_SIZE)");
  TRIMKV_CHECK(o.master_port > 0 && o.master_port < 65536, Input, "master port ", o.master_port,
               " is outside 1..65535");
  TRIMKV_CHECK(!o.master_addr.empty(), Input, "the master address is empty");
  TRIMKV_CHECK(o.timeout_s > 0, Input, "the data-parallel timeout must be > 0 s, got ", o.timeout_s);
}

}  // namespace

int free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  TRIMKV_CHECK(fd >= 0, Io, "cannot open a socket: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  close(fd);
  TRIMKV_CHECK(ok, Io, "no free TCP port on 127.0.0.1: ", std::strerror(error));
  return ntohs(addr.sin_port);
}


#if TRIMKV_HAVE_GLOO

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// One flat buffer of the tensors' elements, in order (all of one dtype).
at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  TRIMKV_ASSERT(!tensors.empty(), "a collective over no tensor");
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors) {
    TRIMKV_ASSERT(t.defined() && t.device().is_cpu() && t.scalar_type() == tensors[0].scalar_type(),
                  "data-parallel collectives take defined CPU tensors of one dtype");
    parts.push_back(t.detach().reshape({-1}));
  }
  return at::cat(parts).contiguous();
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

struct DataParallelGroup::Impl {
  DataParallelOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;

  std::string who() const {
    return "data-parallel rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size);
  }

  // Runs a collective; a peer that died or hung becomes Error{Io} naming the operation.
  template <typename F>
  void collective(const std::string& what, F&& start) {
    try {
      start()->wait();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      TRIMKV_FAIL(Io, who(), ": ", what, " failed: another rank stopped, was killed or did not answer within ",
                  options.timeout_s, " s (", e.what(), ")");
    }
  }
};

DataParallelGroup::DataParallelGroup(const DataParallelOptions& o) : m_impl(std::make_unique<Impl>()) {
  validate(o);
  Impl& I = *m_impl;
  I.options = o;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    so.numWorkers = static_cast<std::size_t>(o.world_size);
    so.waitWorkers = true;
    so.timeout = timeout;
    I.store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    auto go = c10d::ProcessGroupGloo::Options::create(timeout);
    // Ranks on one machine talk over loopback; elsewhere Gloo binds the interface named by
    // GLOO_SOCKET_IFNAME, else the address this machine's hostname resolves to.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (is_loopback(o.master_addr))
      go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      go->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    I.group = c10::make_intrusive<c10d::ProcessGroupGloo>(I.store, o.rank, o.world_size, go);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    TRIMKV_FAIL(Io, I.who(), ": could not join the group at ", o.master_addr, ":", o.master_port,
                " within ", o.timeout_s, " s (is every rank started with the same WORLD_SIZE, MASTER_ADDR and "
                "MASTER_PORT, and is the port free on rank 0's machine?): ", e.what());
  }
}

DataParallelGroup::~DataParallelGroup() = default;

int DataParallelGroup::rank() const { return m_impl->options.rank; }
int DataParallelGroup::size() const { return m_impl->options.world_size; }

void DataParallelGroup::all_reduce_sum(const std::vector<at::Tensor>& tensors, const std::string& what) {
  std::vector<at::Tensor> flat = {flatten(tensors)};
  m_impl->collective("the sum of " + what, [&] { return m_impl->group->allreduce(flat); });
  unflatten(flat[0], tensors);
}

bool DataParallelGroup::any(bool flag, const std::string& what) {
  at::Tensor t = at::full({1}, flag ? 1.0 : 0.0, at::kDouble);
  all_reduce_sum({t}, what);
  return t.item<double>() > 0;
}

#else  // no Gloo in this build

struct DataParallelGroup::Impl {};

DataParallelGroup::DataParallelGroup(const DataParallelOptions& o) {
  validate(o);
  TRIMKV_FAIL(Unsupported, "this build of trimkv has no data-parallel training: LibTorch's c10d/Gloo headers "
              "were not found when it was configured (Debian: apt-get install libgloo-dev, then rebuild)");
}
DataParallelGroup::~DataParallelGroup() = default;
int DataParallelGroup::rank() const { return 0; }
int DataParallelGroup::size() const { return 1; }
void DataParallelGroup::all_reduce_sum(const std::vector<at::Tensor>&, const std::string&) {}
bool DataParallelGroup::any(bool flag, const std::string&) { return flag; }

#endif

}  // namespace trimkv
