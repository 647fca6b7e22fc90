/*
 * fuzz.h -- what the libFuzzer harnesses of t/fuzz/ share.
 *
 * Each harness feeds the bytes libFuzzer makes up to one pure parser of
 * src/ and checks, besides the sanitizers' findings, the parser's own
 * contract (bounds, NUL termination, what a success promises).  A broken
 * promise aborts, which libFuzzer reports as a crash with the input that
 * caused it.  t/fuzz/run.sh builds and runs them.
 */
#ifndef RL_FUZZ_H
#define RL_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The entry point libFuzzer calls with each input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts, naming the harness's line and the promise, when cond is false. */
#define fuzz_assert(cond) do {                                          \
        if (!(cond)) {                                                  \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__,    \
                __LINE__, #cond);                                       \
            abort();                                                    \
        }                                                               \
    } while (0)

#endif /* RL_FUZZ_H */
