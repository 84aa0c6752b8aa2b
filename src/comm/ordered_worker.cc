#include "comm/ordered_worker.h"

namespace autoshard {

OrderedWorker::~OrderedWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t OrderedWorker::submit(std::function<void()> job) {
  int64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The thread first: if it cannot start, nothing was queued.
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  work_.notify_one();
  return ticket;
}

void OrderedWorker::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ >= ticket; });
  if (error_) std::rethrow_exception(error_);
}

void OrderedWorker::drain() noexcept {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ >= submitted_; });
  error_ = nullptr;
}

// Jobs run outside the lock; after a failed job the rest are skipped (their
// peers were stopped too), but still counted as finished so waits return.
void OrderedWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit, nothing left
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = error_ != nullptr;
    lock.unlock();
    std::exception_ptr failed;
    if (!skip) try {
        job();
      } catch (...) {
        failed = std::current_exception();
      }
    lock.lock();
    if (failed && !error_) error_ = failed;
    ++finished_;
    done_.notify_all();
  }
}

}  // namespace autoshard
