// Where the embedded demo model (resources/demo-model, issue 6) is found at run time: the model
// every command and the GUI use when no other is given.
#pragma once
#include <string>

namespace trimkv {

// The first existing folder of: $TRIMKV_DEMO_MODEL; <executable>/../share/trimkv/demo-model
// (installed with `cmake --install`); the source tree's resources/demo-model (a build tree).
// Error{Io} listing the places looked at when none holds a config.json.
std::string default_model_dir();

}  // namespace trimkv
