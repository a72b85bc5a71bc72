#pragma once

// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
// With clang and -Wthread-safety (FERRY_THREAD_SAFETY_ANALYSIS, on by default with clang;
// CI's AddressSanitizer build is a clang build of all the code) the compiler checks at every access that
// the lock a member is GUARDED_BY is held, and at every call that a function's REQUIRES
// locks are held and its EXCLUDES locks are not. On other compilers the macros are empty.
// Compare LevelDB's port/thread_annotations.h and Abseil's thread_annotations.h.
//
// Use them with ferry::Mutex (common/util/mutex.h): libstdc++'s std::mutex is not a
// capability, so the analysis cannot see it.
//
//   Mutex mu_;                     // guards queue_ and closed_
//   std::deque<int> queue_ GUARDED_BY(mu_);
//   void PopLocked() REQUIRES(mu_);
//   void Push(int v) EXCLUDES(mu_);

#if defined(__clang__) && !defined(SWIG)
#define FERRY_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define FERRY_THREAD_ANNOTATION_(x)
#endif

// A class whose objects are locks (a capability named `x` in diagnostics).
#ifndef CAPABILITY
#define CAPABILITY(x) FERRY_THREAD_ANNOTATION_(capability(x))
#endif

// An RAII class that acquires a capability in its constructor and releases it in its
// destructor.
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY FERRY_THREAD_ANNOTATION_(scoped_lockable)
#endif

// The member may be read or written only with the capability held.
#ifndef GUARDED_BY
#define GUARDED_BY(x) FERRY_THREAD_ANNOTATION_(guarded_by(x))
#endif

// The pointee of the (pointer) member may be accessed only with the capability held.
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) FERRY_THREAD_ANNOTATION_(pt_guarded_by(x))
#endif

// Lock ordering: this lock is taken after / before the named ones.
#ifndef ACQUIRED_AFTER
#define ACQUIRED_AFTER(...) FERRY_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#endif
#ifndef ACQUIRED_BEFORE
#define ACQUIRED_BEFORE(...) FERRY_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#endif

// The caller must hold the capabilities (exclusively / shared) when calling.
#ifndef REQUIRES
#define REQUIRES(...) FERRY_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#endif
#ifndef REQUIRES_SHARED
#define REQUIRES_SHARED(...) FERRY_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#endif

// The function acquires / releases the capabilities (no argument: `this`).
#ifndef ACQUIRE
#define ACQUIRE(...) FERRY_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE_SHARED
#define ACQUIRE_SHARED(...) FERRY_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) FERRY_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#endif
#ifndef RELEASE_SHARED
#define RELEASE_SHARED(...) FERRY_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
#endif
#ifndef TRY_ACQUIRE
#define TRY_ACQUIRE(...) FERRY_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#endif

// The caller must NOT hold the capabilities (the function takes them itself).
#ifndef EXCLUDES
#define EXCLUDES(...) FERRY_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#endif

// Checks at run time that the capability is held, and tells the analysis so.
#ifndef ASSERT_CAPABILITY
#define ASSERT_CAPABILITY(x) FERRY_THREAD_ANNOTATION_(assert_capability(x))
#endif

// The function returns a reference to the capability.
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) FERRY_THREAD_ANNOTATION_(lock_returned(x))
#endif

// Turns the analysis off for one function: for code whose locking it cannot follow
// (say why next to each use).
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS FERRY_THREAD_ANNOTATION_(no_thread_safety_analysis)
#endif
