/*
 * check_main.c -- runs every unit test suite.
 *
 * The exit status is 0 when every test passed and 1 otherwise, so that
 * "make unit" and "make test" stop on a failure.
 */
#include <stdlib.h>

#include <check.h>         /* t/check.h: the suites, then Check */

int
main(void)
{
    SRunner *sr;
    int failed;

    sr = srunner_create(config_suite());
    srunner_add_suite(sr, request_suite());
    srunner_add_suite(sr, rules_suite());
    srunner_add_suite(sr, cache_suite());
    srunner_add_suite(sr, limiter_suite());
    srunner_add_suite(sr, response_suite());
    srunner_add_suite(sr, util_suite());
    srunner_add_suite(sr, buf_suite());
    srunner_add_suite(sr, addr_suite());
    srunner_add_suite(sr, fcgi_suite());
    srunner_add_suite(sr, shm_suite());
    srunner_add_suite(sr, validate_suite());
    srunner_add_suite(sr, decide_suite());
    srunner_add_suite(sr, algo_suite());
    srunner_add_suite(sr, cluster_suite());
    srunner_add_suite(sr, stats_suite());
    srunner_add_suite(sr, keyfilter_suite());
    srunner_add_suite(sr, arena_suite());
    srunner_add_suite(sr, release_suite());
    srunner_add_suite(sr, lease_suite());
    srunner_add_suite(sr, redis_reply_suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
