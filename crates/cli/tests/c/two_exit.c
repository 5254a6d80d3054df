/* two_exit.c -- two threads race to _exit: a worker calls _exit(4) and
 * the main thread _exit(5) after the same 30 ms of busy work. Whichever
 * ends the process, the runtime's report must be written first. */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static void busy_ms(long ms)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static void *worker(void *arg)
{
	(void)arg;
	busy_ms(30);
	_exit(4);
}

int main(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 1;
	busy_ms(30);
	_exit(5);
}
