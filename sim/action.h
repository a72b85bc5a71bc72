#pragma once

// Action: what an event does, a move-only `void()` callable. It holds closures of up to
// kInlineBytes in place, so scheduling one allocates nothing; a larger closure is boxed
// on the heap (a unique_ptr held in place). The simulator makes millions of them a
// second (an acknowledgement, a push and a sum per message), which std::function (16
// bytes in place in libstdc++) would each allocate.
//
//   Action a = [worker, cookie, frame, sent] { worker->OnAck(cookie, frame, sent); };
//   if (a) a();
//
// An Action made from nullptr, or from an empty std::function, is empty: `if (a)` is
// false.

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace ferry::sim {

class Action {
 public:
  static constexpr size_t kInlineBytes = 48;  // a closure of six pointers or numbers

  Action() = default;
  Action(std::nullptr_t) {}  // NOLINT: implicit, as std::function's
  template <typename F, typename T = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<T, Action> &&
                                        std::is_invocable_r_v<void, T&>>>
  Action(F&& f) {  // NOLINT: implicit, as std::function's
    if constexpr (std::is_same_v<T, std::function<void()>>) {
      if (!f) return;
    }
    if constexpr (kFitsInPlace<T>) {
      Emplace<T>(std::forward<F>(f));
    } else {
      Emplace<Boxed<T>>(Boxed<T>{std::make_unique<T>(std::forward<F>(f))});
    }
  }
  Action(Action&& other) noexcept { MoveFrom(other); }
  Action& operator=(Action&& other) noexcept {
    if (this != &other) {
      Reset();
      MoveFrom(other);
    }
    return *this;
  }
  Action(const Action&) = delete;
  Action& operator=(const Action&) = delete;
  ~Action() { Reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  // REQUIRES: not empty (an empty one throws std::bad_function_call, as std::function).
  void operator()() {
    if (ops_ == nullptr) throw std::bad_function_call();
    ops_->invoke(buffer_);
  }

 private:
  static constexpr size_t kAlign = alignof(void*);
  // What an Action does with the closure in its buffer. Null `relocate`: the closure is
  // trivially copyable (pointers and numbers, the usual case) and moves as bytes; null
  // `destroy`: it needs no destruction.
  struct Ops {
    void (*invoke)(void* closure);
    void (*relocate)(void* from, void* to);  // move-constructs at `to`, destroys `from`
    void (*destroy)(void* closure);
  };
  template <typename T>
  static constexpr bool kFitsInPlace = sizeof(T) <= kInlineBytes &&
                                       alignof(T) <= kAlign &&
                                       std::is_nothrow_move_constructible_v<T>;
  template <typename T>
  struct Boxed {
    std::unique_ptr<T> closure;
    void operator()() { (*closure)(); }
  };
  template <typename T>
  static constexpr Ops kOps = {
      [](void* c) { (*static_cast<T*>(c))(); },
      std::is_trivially_copyable_v<T> ? nullptr
                                      : +[](void* from, void* to) {
                                          new (to) T(std::move(*static_cast<T*>(from)));
                                          static_cast<T*>(from)->~T();
                                        },
      std::is_trivially_destructible_v<T> ? nullptr
                                          : +[](void* c) { static_cast<T*>(c)->~T(); },
  };
  template <typename T, typename F>
  void Emplace(F&& f) {
    new (buffer_) T(std::forward<F>(f));
    ops_ = &kOps<T>;
  }
  void MoveFrom(Action& other) noexcept {
    if (other.ops_ == nullptr) return;
    if (other.ops_->relocate == nullptr) {
      std::memcpy(buffer_, other.buffer_, kInlineBytes);
    } else {
      other.ops_->relocate(other.buffer_, buffer_);
    }
    ops_ = other.ops_;
    other.ops_ = nullptr;
  }
  void Reset() {
    if (ops_ == nullptr) return;
    if (ops_->destroy != nullptr) ops_->destroy(buffer_);
    ops_ = nullptr;
  }

  const Ops* ops_ = nullptr;  // null: empty
  alignas(kAlign) unsigned char buffer_[kInlineBytes];
};

}  // namespace ferry::sim
