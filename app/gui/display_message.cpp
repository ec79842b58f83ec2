#include "display_message.h"

DisplayMessage displayMessage(const trimkv::Message& message) {
  DisplayMessage d;
  d.role = QString::fromStdString(message.role);
  // Placeholders are needed only when some text precedes an image (content_from_prompt puts
  // images without placeholders first).
  bool textSeen = false, needPlaceholders = false;
  for (const trimkv::ContentPart& p : message.content) {
    if (p.kind == trimkv::ContentPart::Kind::Text) textSeen = textSeen || !p.text.empty();
    else needPlaceholders = needPlaceholders || textSeen;
  }
  for (const trimkv::ContentPart& p : message.content) {
    if (p.kind == trimkv::ContentPart::Kind::Text) {
      d.text += QString::fromStdString(p.text);
    } else {
      d.images << QString::fromStdString(p.path);
      if (needPlaceholders) d.text += QString::fromLatin1(trimkv::kImagePlaceholder);
    }
  }
  return d;
}
