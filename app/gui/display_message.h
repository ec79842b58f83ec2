// A transcript message as the conversation view and the input show it: role, the text with an
// <image> placeholder where an image sits between pieces of text (none when every image comes
// first, the common case, so the text reads as typed), and the image files in order. Sending
// (text, images) back through ChatEngine::add_user_turn gives the same content parts.
#pragma once
#include <QString>
#include <QStringList>

#include "trimkv/core/conversation_types.h"

struct DisplayMessage {
  QString role;  // user | assistant | system
  QString text;
  QStringList images;
};

DisplayMessage displayMessage(const trimkv::Message& message);
