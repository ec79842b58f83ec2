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

// The one ramp for β and scores (UI.md): viridis, perceptually uniform and readable in grey,
// from dark violet (t = 0: forgotten first / lowest score) to yellow (t = 1: kept longest).
inline QColor ramp(double t) {
  static const QColor stops[] = {QColor(0x44, 0x01, 0x54), QColor(0x3b, 0x52, 0x8b), QColor(0x21, 0x90, 0x8d),
                                 QColor(0x5d, 0xc8, 0x63), QColor(0xfd, 0xe7, 0x25)};
  constexpr int kLast = 4;
  if (!(t > 0)) return stops[0];  // also NaN
  if (t >= 1) return stops[kLast];
  const double x = t * kLast;
  const int i = static_cast<int>(x);
  const double f = x - i;
  const QColor &a = stops[i], &b = stops[i + 1];
  return QColor::fromRgbF(static_cast<float>(a.redF() + f * (b.redF() - a.redF())),
                          static_cast<float>(a.greenF() + f * (b.greenF() - a.greenF())),
                          static_cast<float>(a.blueF() + f * (b.blueF() - a.blueF())));
}

}  // namespace ModalityPalette
