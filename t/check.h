/*
 * check.h -- the registry of the unit test suites.
 *
 * Each t/check_<area>.c file defines one suite for one pure module of
 * src/ (configuration, request parsing, rule matching, caches, the limiter's
 * call and reply, responses, helpers); t/check_main.c runs them all in one
 * Check runner.  Nothing here touches the network.
 *
 * The Makefile compiles the tests with -It, so this file shadows the Check
 * library's own <check.h>: the test files include it as <check.h> (found
 * through -It) and #include_next then reaches the library's header, which
 * comes later in the search path.
 */
#ifndef RL_T_CHECK_H
#define RL_T_CHECK_H

#include_next <check.h>

Suite *config_suite(void);
Suite *request_suite(void);
Suite *rules_suite(void);
Suite *cache_suite(void);
Suite *limiter_suite(void);
Suite *response_suite(void);
Suite *util_suite(void);
Suite *buf_suite(void);
Suite *addr_suite(void);
Suite *fcgi_suite(void);
Suite *shm_suite(void);
Suite *validate_suite(void);
Suite *cluster_suite(void);
Suite *stats_suite(void);
Suite *decide_suite(void);
Suite *algo_suite(void);
Suite *keyfilter_suite(void);
Suite *arena_suite(void);
Suite *release_suite(void);
Suite *lease_suite(void);
Suite *redis_reply_suite(void);

#endif /* RL_T_CHECK_H */
