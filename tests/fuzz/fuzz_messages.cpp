// Fuzz target: a conversation file (Hugging Face messages JSON, as `trimkv chat`'s /save and the
// Studio's transcript export write it; `generate --messages` reads it).
#include "fuzz_input.h"
#include "trimkv/core/conversation_types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trimkv::fuzz::input_file(data, size, "conversation.json");
  trimkv::fuzz::expect_only_trimkv_errors("messages", [&] { trimkv::read_messages_file(path); });
  return 0;
}
