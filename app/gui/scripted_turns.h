// A conversation given on the command line (`trimkv-studio --prompt A --image X --prompt B
// --send`): once the model is loaded each prompt is sent in turn, the next when the previous
// answer has finished, as if typed. For demos and for tests that drive the real process (the
// kill -9 autosave check in tests/gui). The images go with the first prompt. Each turn sent is
// reported on stderr ("trimkv-studio: sent scripted turn N of M"); a failed or stopped turn ends
// the script, saying so there. A child of the window it drives.
#pragma once
#include <QObject>
#include <QStringList>

class MainWindow;
struct TurnStats;

class ScriptedTurns : public QObject {
  Q_OBJECT
 public:
  ScriptedTurns(MainWindow* window, QStringList prompts, QStringList images);
  void start();  // sends the first prompt (call once the model is loaded)

 private:
  void sendNext();
  void stop(const QString& why);  // the prompts not sent yet are dropped
  MainWindow* m_window;
  QStringList m_prompts;
  QStringList m_images;
  int m_next = 0;          // the prompt sent next
  bool m_running = false;  // from start() until the last answer, a failure or a stop
};
