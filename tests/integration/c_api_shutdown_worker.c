/* ferry-test-c-shutdown: ferry_shutdown() on one thread while another is inside C API calls
 * (worker/c_api.h, worker/binding_core.h), compiled as C. Runs as the only worker of a job.
 *
 * A caller thread push_pulls and waits in a loop; once it has finished kWarmup operations
 * the main thread calls ferry_shutdown(). The caller's calls in progress must finish (each
 * holds the worker), and its next call must fail with -6 (kShutdown) and a message naming
 * the shutdown: never a crash, never "not initialised". Then, on the main thread,
 * ferry_rank(), ferry_wait() and ferry_init() must return -6 too, and a second
 * ferry_shutdown() 0. Before ferry_init(), ferry_rank() must return -7 ("not
 * initialised"). Prints "OK c api shutdown".
 * Exit codes: 0 as expected, 1 a Ferry error, 3 a wrong result or a missing error. */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "worker/c_api.h"

enum { kCount = 4096, kWarmup = 20, kShutdown = 6, kInvalidArgument = 7 };

static int g_done = 0; /* operations the caller finished; guarded by g_mu */
static int g_code = 0; /* the caller's failing return code */
static char g_error[512];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

static void* Caller(void* arg) {
  (void)arg;
  static float in[kCount], out[kCount];
  for (int i = 0; i < kCount; ++i) in[i] = 1.0f;
  for (;;) {
    int64_t h = ferry_push_pull_async("c.shutdown", in, out, 0, kCount, 0, INT32_MIN);
    int rc = h < 0 ? (int)h : ferry_wait(h);
    int failed = rc < 0;
    pthread_mutex_lock(&g_mu);
    if (rc < 0) {
      g_code = rc;
      snprintf(g_error, sizeof(g_error), "%s", ferry_last_error());
    } else if (out[0] != 1.0f || out[kCount - 1] != 1.0f) {
      g_code = -1000;
      failed = 1;
      snprintf(g_error, sizeof(g_error), "wrong sum %g", (double)out[0]);
    } else {
      ++g_done;
    }
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    if (failed) return NULL;
  }
}

static int Expect(const char* what, int rc, int want, const char* text) {
  if (rc == want && strstr(ferry_last_error(), text) != NULL) return 0;
  fprintf(stderr, "WRONG %s: returned %d (want %d), '%s' (want '%s')\n", what, rc, want,
          ferry_last_error(), text);
  return 3;
}

int main(void) {
  if (Expect("ferry_rank before init", ferry_rank(), -kInvalidArgument, "not initialised")) {
    return 3;
  }
  if (ferry_init() != 0) {
    fprintf(stderr, "ferry_init: %s\n", ferry_last_error());
    return 1;
  }
  const int64_t shape[1] = {kCount};
  if (ferry_declare_tensor("c.shutdown", 0, shape, 1) < 0) {
    fprintf(stderr, "ferry_declare_tensor: %s\n", ferry_last_error());
    return 1;
  }
  pthread_t caller;
  if (pthread_create(&caller, NULL, Caller, NULL) != 0) return 1;
  pthread_mutex_lock(&g_mu);
  while (g_done < kWarmup && g_code == 0) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  /* The caller is in a call, or about to start one, right now. */
  const int shutdown_rc = ferry_shutdown();
  if (shutdown_rc != 0) {
    fprintf(stderr, "ferry_shutdown: %s\n", ferry_last_error());
    return 1;
  }
  pthread_join(caller, NULL);
  printf("caller: %d operations, then %d: %s\n", g_done, g_code, g_error);
  /* "ferry was shut down" (the core), or "push_pull of 'c.shutdown' after Shutdown()" (the
   * worker, for a call that got the worker just before). */
  if (g_code != -kShutdown || (strstr(g_error, "shut down") == NULL &&
                               strstr(g_error, "after Shutdown()") == NULL)) {
    fprintf(stderr, "WRONG caller's end: %d '%s' (want %d, a shutdown)\n", g_code, g_error,
            -kShutdown);
    return 3;
  }
  if (Expect("ferry_rank after shutdown", ferry_rank(), -kShutdown, "ferry was shut down") ||
      Expect("ferry_wait after shutdown", ferry_wait(1), -kShutdown, "ferry was shut down") ||
      Expect("ferry_init after shutdown", ferry_init(), -kShutdown, "ferry was shut down")) {
    return 3;
  }
  if (ferry_shutdown() != 0) {
    fprintf(stderr, "second ferry_shutdown: %s\n", ferry_last_error());
    return 1;
  }
  printf("OK c api shutdown\n");
  fflush(stdout);
  return 0;
}
