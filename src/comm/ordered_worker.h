// OrderedWorker: one thread that runs submitted jobs in submission order (an
// in-process device's communication thread: its gradient buckets are reduced
// there while the device computes). Tickets count jobs, so waiting for one
// job waits for every job before it too.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace autoshard {

class OrderedWorker {
 public:
  OrderedWorker() = default;
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;
  // Finishes the queued jobs, then joins the thread.
  ~OrderedWorker();

  // Queues `job` (the thread starts on the first one); returns its ticket.
  int64_t submit(std::function<void()> job);
  // Waits until job `ticket` and those before it ran; rethrows the first
  // error of a job (after which the remaining queued jobs are skipped).
  void wait(int64_t ticket);
  // Waits for every queued job, forgetting any error (after an abort).
  void drain() noexcept;

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<std::function<void()>> queue_;
  int64_t submitted_ = 0, finished_ = 0;
  std::exception_ptr error_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace autoshard
