// SKIP_WITHOUT_GLOO(): ends a data-parallel test with a "skipped" warning in a build without
// c10d/Gloo (one against a PyPI LibTorch, which ships no Gloo headers); Debian's LibTorch with
// libgloo-dev (what packaging/setup.sh installs) has it.
#pragma once
#include <catch2/catch.hpp>

#include "trimkv/core/data_parallel.h"

#define SKIP_WITHOUT_GLOO()                                                 \
  if (!trimkv::data_parallel_available()) {                                \
    WARN("skipped: this build has no c10d/Gloo (data-parallel training)"); \
    return;                                                                \
  }
