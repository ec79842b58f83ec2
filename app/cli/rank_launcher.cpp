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
#include <thread>

#include "args.h"
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

std::vector<pid_t> g_ranks;  // for the signal handler
extern "C" void forward_signal(int sig) {
  for (pid_t p : g_ranks)
    if (p > 0) kill(p, sig);
}

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
  g_ranks.assign(n, 0);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      forward_signal(SIGTERM);
      throw UsageError(std::string("--nproc: cannot start rank ") + std::to_string(r) + ": " + std::strerror(errno));
    }
    if (pid == 0) {
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
    g_ranks[r] = pid;
  }
  err << "train-gates: " << n << " local ranks on 127.0.0.1:" << port << " (pids";
  for (pid_t p : g_ranks) err << " " << p;
  err << ")\n" << std::flush;
  struct sigaction sa {}, old_int{}, old_term{};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

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
        forward_signal(stop_signal);
        stop_signal = SIGKILL;
        next_signal = Clock::now() + std::chrono::seconds(20);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    int r = 0;
    while (r < n && g_ranks[r] != pid) ++r;
    if (r == n) continue;
    g_ranks[r] = 0;
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
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  g_ranks.clear();
  return result;
}

}  // namespace trimkv::cli
