// One palette everywhere (UI.md): text, image and special entries keep their colours in the grid,
// the strip, the overlay and the legend; evicted is the same colour faded. Chosen to stay readable
// on light and dark backgrounds and for the common colour-vision deficiencies (blue vs orange).
#pragma once
#include <QColor>

#include "trimkv/core/kv_types.h"

namespace ModalityPalette {

inline QColor text() { return QColor(0x3b, 0x82, 0xf6); }     // blue
inline QColor image() { return QColor(0xf5, 0x9e, 0x0b); }    // orange
inline QColor special() { return QColor(0x9c, 0xa3, 0xaf); }  // grey
inline QColor unknown() { return QColor(0x6b, 0x72, 0x80); }  // token no snapshot saw kept

inline QColor of(trimkv::Modality m) {
  switch (m) {
    case trimkv::Modality::Text: return text();
    case trimkv::Modality::Image: return image();
    case trimkv::Modality::Special: return special();
  }
  return unknown();
}

// The evicted variant of a colour: same hue, mostly transparent.
inline QColor faded(QColor c) {
  c.setAlpha(55);
  return c;
}

}  // namespace ModalityPalette
