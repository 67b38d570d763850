// SPDX-License-Identifier: GPL-2.0
/*
 * fct_park N: create N threads that block forever, print "tid <TID>" for each
 * (and "ready" when all exist), then block too. For set_pid thread-id tests;
 * kill it to end. No start gate: it does nothing traced-worthy after "ready".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int started;

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	printf("tid %ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	started++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1;
	pthread_t t;
	int i;

	if (n < 1 || n > 64)
		return 2;
	for (i = 0; i < n; i++)
		if (pthread_create(&t, NULL, worker, NULL))
			return 1;
	pthread_mutex_lock(&mu);
	while (started < n)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
	return 0;
}
