// Joining a data-parallel group from the environment, and --nproc's local ranks (rank_launcher.h).
#include "rank_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "args.h"
#include "interrupts.h"
#include "trimkv/core/data_parallel.h"

namespace trimkv::cli {

namespace {

// An integer environment variable in [lo, hi], or `fallback` when unset.
int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::optional<int64_t> x = parse_integer(v, lo, hi);  // args.h
  if (!x)
    throw UsageError(std::string("environment variable ") + name + "='" + v + "' is not an integer in " +
                     std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int>(*x);
}

// The local ranks' pids, 0 once reaped; signals reach them from the interrupt watcher's thread too.
class Ranks {
 public:
  explicit Ranks(int n) : m_pids(static_cast<size_t>(n), 0) {}
  void started(int r, pid_t pid) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_pids[static_cast<size_t>(r)] = pid;
  }
  // The rank that `pid` was (now reaped), or -1.
  int reaped(pid_t pid) {
    std::lock_guard<std::mutex> lock(m_mutex);
    for (size_t r = 0; r < m_pids.size(); ++r)
      if (m_pids[r] == pid) {
        m_pids[r] = 0;
        return static_cast<int>(r);
      }
    return -1;
  }
  void signal_all(int sig) {
    std::lock_guard<std::mutex> lock(m_mutex);
    for (pid_t p : m_pids)
      if (p > 0) kill(p, sig);
  }
  std::vector<pid_t> pids() {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_pids;
  }

 private:
  std::mutex m_mutex;
  std::vector<pid_t> m_pids;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

}  // namespace

DataParallelOptions data_parallel_from_environment() {
  DataParallelOptions o;
  o.world_size = env_int("WORLD_SIZE", 1, 1, 1 << 16);
  o.rank = env_int("RANK", 0, 0, o.world_size - 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", o.master_port, 1, 65535);
  return o;
}

int launch_local_ranks(int n, const std::vector<std::string>& args, std::ostream& err) {
  char self[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) throw UsageError("--nproc: cannot find this program's own path (/proc/self/exe)");
  self[len] = '\0';
  const int port = free_local_port();  // data_parallel.h
  Ranks ranks(n);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      ranks.signal_all(SIGTERM);
      throw UsageError(std::string("--nproc: cannot start rank ") + std::to_string(r) + ": " + std::strerror(errno));
    }
    if (pid == 0) {
      restore_signal_mask_for_exec();
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<std::string> a = {self};
      a.insert(a.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& x : a) argv.push_back(x.data());
      argv.push_back(nullptr);
      execv(self, argv.data());
      _exit(127);
    }
    ranks.started(r, pid);
  }
  err << "train-gates: " << n << " local ranks on 127.0.0.1:" << port << " (pids";
  for (pid_t p : ranks.pids()) err << " " << p;
  err << ")\n" << std::flush;
  const InterruptAction forward({SIGINT, SIGTERM}, [&ranks](int sig) { ranks.signal_all(sig); });

  // After a failure the others get 10 s to fail on their own (their next collective does, naming
  // the lost peer), then SIGTERM, then SIGKILL 20 s later.
  using Clock = std::chrono::steady_clock;
  int result = 0, running = n, stop_signal = SIGTERM;
  bool stopping = false;
  Clock::time_point next_signal = Clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, stopping ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {
      if (Clock::now() > next_signal) {
        ranks.signal_all(stop_signal);
        stop_signal = SIGKILL;
        next_signal = Clock::now() + std::chrono::seconds(20);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const int r = ranks.reaped(pid);
    if (r < 0) continue;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool interrupted = WIFEXITED(status) && WEXITSTATUS(status) == 130;
    if (ok) continue;
    if (interrupted) {
      if (result == 0) result = 130;
      continue;
    }
    if (!stopping) {
      err << "train-gates: rank " << r << " (pid " << pid << ") " << describe_status(status)
          << "; stopping the other ranks\n" << std::flush;
      result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      stopping = true;
      next_signal = Clock::now() + std::chrono::seconds(10);
    }
  }
  return result;
}

}  // namespace trimkv::cli
