// Fuzz target: a chat template (Jinja source) parsed and rendered over a fixed conversation with a
// system prompt, an image and two turns, in both content styles.
#include "fuzz_input.h"
#include "trimkv/core/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  trimkv::fuzz::expect_only_trimkv_errors("chat_template", [&] {
    using trimkv::ContentPart;
    const trimkv::ChatTemplate t = trimkv::ChatTemplate::from_source(source, "fuzz input");
    const std::vector<trimkv::Message> messages = {
        {"system", {ContentPart::text_part("Be brief.")}},
        {"user", {ContentPart::image_part("a.png"), ContentPart::text_part("What is this?")}},
        {"assistant", {ContentPart::text_part("A red square.")}},
        {"user", {ContentPart::text_part("And now?")}}};
    t.render(messages, true, trimkv::ContentStyle::Parts);
    const std::vector<trimkv::Message> text_only = {{"user", {ContentPart::text_part("Hi")}}};
    t.render(text_only, false, trimkv::ContentStyle::Strings);
  });
  return 0;
}
