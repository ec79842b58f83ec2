// Exports what an inspector widget shows (head grid, image overlay, timeline plot) as a figure:
// PNG (the widget's pixels at the screen's scale) or SVG (vector, drawn by the widget's own paint
// code through QSvgGenerator), chosen by the file's suffix. Written atomically (atomic_file.h).
#pragma once
#include <QString>

class QWidget;

enum class FigureFormat { Png, Svg };

// From the suffix (.png / .svg, any case). Error{Input} naming the file for any other.
FigureFormat figureFormatOf(const QString& path);
// Error{Io} naming the file when it cannot be written; Error{Input} for an unknown suffix.
void exportFigure(QWidget* widget, const QString& path, const QString& title);
