#include "trimkv/core/conversation_types.h"

#include "trimkv/core/error.h"

namespace trimkv {

std::vector<ContentPart> content_from_prompt(const std::string& text,
                                             const std::vector<std::string>& images) {
  const std::string marker = kImagePlaceholder;
  std::vector<ContentPart> parts;
  size_t n_markers = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, p + marker.size()))
    ++n_markers;
  if (n_markers == 0) {
    for (const auto& path : images) parts.push_back(ContentPart::image_part(path));
    if (!text.empty()) parts.push_back(ContentPart::text_part(text));
    return parts;
  }
  TRIMKV_CHECK(n_markers == images.size(), Input, "the prompt has ", n_markers, " ", marker,
               " placeholder", n_markers == 1 ? "" : "s", " but ", images.size(), " image",
               images.size() == 1 ? " was" : "s were", " given");
  size_t begin = 0, k = 0;
  for (size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, begin)) {
    if (p > begin) parts.push_back(ContentPart::text_part(text.substr(begin, p - begin)));
    parts.push_back(ContentPart::image_part(images[k++]));
    begin = p + marker.size();
  }
  if (begin < text.size()) parts.push_back(ContentPart::text_part(text.substr(begin)));
  return parts;
}

}  // namespace trimkv
