// `trimkv-studio --screenshot FILE.png`: drives a MainWindow through the sample conversation on
// the model it was given, selects an informative head, renders the window (QWidget::grab) into
// FILE.png and reports the outcome through finished(exitCode): 0 saved; 1 an error (printed to
// stderr: the model, the image, the answer or the file); 2 timed out.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>
#include <QTimer>

class MainWindow;

class ScreenshotRun : public QObject {
  Q_OBJECT

 public:
  static constexpr int kTimeoutMs = 10 * 60 * 1000;

  ScreenshotRun(MainWindow* window, QString outputPath, QObject* parent = nullptr);
  void start(const QString& modelDir);
  // The turn to send instead of the sample conversation's (--prompt / --image).
  void setTurn(const QString& text, const QStringList& images);

 Q_SIGNALS:
  void finished(int exitCode);

 private:
  void runSample();
  void capture();
  void fail(int code, const QString& message);

  MainWindow* m_window;
  QString m_output;
  QTemporaryDir m_samples;
  QString m_text;
  QStringList m_images;
  bool m_ownTurn = false;
  QTimer m_timeout;
  bool m_done = false;
};
