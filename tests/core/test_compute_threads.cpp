// set_compute_threads (cpu_tuning.h): 0 means every hardware thread, or OMP_NUM_THREADS when the
// user set it; explicit counts win; more than the machine has are capped.
#include <ATen/Parallel.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <thread>

#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/error.h"

using namespace trimkv;

TEST_CASE("Compute threads: 0 is every hardware thread unless OMP_NUM_THREADS says otherwise", "[threads]") {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const char* before = std::getenv("OMP_NUM_THREADS");
  const std::string saved = before ? before : "";
  unsetenv("OMP_NUM_THREADS");
  REQUIRE(set_compute_threads(0) == cores);
  setenv("OMP_NUM_THREADS", "1", 1);
  REQUIRE(set_compute_threads(0) == 1);
  REQUIRE(set_compute_threads(cores) == cores);  // an explicit count wins
  setenv("OMP_NUM_THREADS", "100000", 1);
  REQUIRE(set_compute_threads(0) == cores);  // capped at the machine
  setenv("OMP_NUM_THREADS", "nonsense", 1);
  REQUIRE(set_compute_threads(0) == cores);  // not a count: ignored
  REQUIRE_THROWS_AS(set_compute_threads(-1), Error);
  if (before) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  else unsetenv("OMP_NUM_THREADS");
  set_compute_threads(0);
}
