/*
 * probe: tries one privileged or escape-shaped operation inside a container
 * and prints what happened, for the security tests. Built statically by the
 * test harness (tests/common/images.rs) into the busybox-probe test image.
 *
 * Every subcommand prints "ok[ detail]" and exits 0, or prints
 * "errno=N (text)" and exits 1. A filter that kills the process leaves no
 * output and a signal exit.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

static int fail(void) {
    int e = errno;
    printf("errno=%d (%s)\n", e, strerror(e));
    return 1;
}

static int result(long rc) {
    if (rc < 0)
        return fail();
    printf("ok %ld\n", rc);
    return 0;
}

struct clone_args_v0 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

static int wait_child(pid_t pid) {
    int status;
    if (waitpid(pid, &status, 0) < 0)
        return fail();
    printf("ok child exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}

static int do_clone3(void) {
    struct clone_args_v0 args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid < 0)
        return fail();
    if (pid == 0)
        _exit(0);
    return wait_child(pid);
}

static int do_clone_newuser(void) {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (pid < 0)
        return fail();
    if (pid == 0)
        _exit(0);
    return wait_child(pid);
}

static int do_ptrace_child(void) {
    pid_t child = fork();
    if (child < 0)
        return fail();
    if (child == 0) {
        pause();
        _exit(0);
    }
    long rc = ptrace(PTRACE_ATTACH, child, 0, 0);
    int saved = errno;
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    errno = saved;
    return result(rc);
}

/* Prints "ok" and the open descriptors in `dir` (a /proc/PID/fd) with their
 * targets, leaving out `skip` (the descriptor reading the list). */
static int list_fds(const char *dir, int skip_own) {
    DIR *d = opendir(dir);
    if (!d)
        return fail();
    int own = skip_own ? dirfd(d) : -1;
    struct dirent *e;
    printf("ok");
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == own)
            continue;
        char path[400], target[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n < 0 ? 0 : n] = 0;
        printf(" %s=%s", e->d_name, target);
    }
    printf("\n");
    closedir(d);
    return 0;
}

/* For every other process whose command line mentions `needle`: where its
 * executable is, whether that file sits on a read-only mount, and whether
 * it can be opened for writing. */
static int do_exe_attack(const char *needle) {
    DIR *d = opendir("/proc");
    if (!d)
        return fail();
    struct dirent *e;
    pid_t self = getpid();
    int found = 0;
    while ((e = readdir(d))) {
        pid_t pid = atoi(e->d_name);
        if (pid <= 0 || pid == self)
            continue;
        char path[64], cmd[256] = {0};
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        for (ssize_t i = 0; i < n; i++)
            if (cmd[i] == 0)
                cmd[i] = ' ';
        if (!strstr(cmd, needle))
            continue;
        found++;
        char link[512] = {0};
        snprintf(path, sizeof path, "/proc/%d/exe", pid);
        if (readlink(path, link, sizeof link - 1) < 0)
            snprintf(link, sizeof link, "errno=%d", errno);
        int ro = -1;
        int rfd = open(path, O_RDONLY);
        int read_errno = rfd < 0 ? errno : 0;
        if (rfd >= 0) {
            struct statvfs st;
            if (fstatvfs(rfd, &st) == 0)
                ro = (st.f_flag & ST_RDONLY) ? 1 : 0;
            close(rfd);
        }
        int wfd = open(path, O_WRONLY);
        int write_errno = wfd < 0 ? errno : 0;
        if (wfd >= 0)
            close(wfd);
        printf("pid=%d cmd=[%s] exe=[%s] read_errno=%d read_only=%d write_errno=%d\n", pid, cmd, link, read_errno,
               ro, write_errno);
    }
    closedir(d);
    printf("found=%d\n", found);
    return 0;
}

static int do_read(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return fail();
    char buf[4096];
    long total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        total += n;
    if (n < 0)
        return fail();
    close(fd);
    printf("ok %ld bytes\n", total);
    return 0;
}

static int do_mknod_open(const char *path, const char *kind, const char *major, const char *minor) {
    mode_t type = kind[0] == 'b' ? S_IFBLK : S_IFCHR;
    unlink(path);
    if (mknod(path, type | 0600, makedev(atoi(major), atoi(minor))) < 0) {
        printf("mknod ");
        return fail();
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    int saved = errno;
    unlink(path);
    errno = saved;
    if (fd < 0) {
        printf("mknod ok, open ");
        return fail();
    }
    close(fd);
    printf("ok mknod and open\n");
    return 0;
}

static int do_sethostname_same(void) {
    char name[256];
    if (gethostname(name, sizeof name) < 0)
        return fail();
    return result(sethostname(name, strlen(name)));
}

static int do_clock_settime(void) {
    /* CLOCK_MONOTONIC cannot be set: EINVAL when the call is allowed at all. */
    struct timespec ts = {0, 0};
    return result(syscall(SYS_clock_settime, CLOCK_MONOTONIC, &ts));
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: probe COMMAND [ARGS]\n");
        return 2;
    }
    const char *c = argv[1];
    const char *a1 = argc > 2 ? argv[2] : "";
    if (!strcmp(c, "clone3"))
        return do_clone3();
    if (!strcmp(c, "clone-newuser"))
        return do_clone_newuser();
    if (!strcmp(c, "unshare-user"))
        return result(unshare(CLONE_NEWUSER));
    if (!strcmp(c, "unshare-mount"))
        return result(unshare(CLONE_NEWNS));
    if (!strcmp(c, "personality"))
        return result(personality(strtoul(a1, NULL, 0)));
    if (!strcmp(c, "keyctl"))
        /* KEYCTL_GET_KEYRING_ID of the user keyring, without creating one. */
        return result(syscall(SYS_keyctl, 0, -4, 0));
    if (!strcmp(c, "ptrace-child"))
        return do_ptrace_child();
    if (!strcmp(c, "clock-settime"))
        return do_clock_settime();
    if (!strcmp(c, "init-module"))
        return result(syscall(SYS_init_module, NULL, 0, ""));
    if (!strcmp(c, "reboot"))
        /* Wrong magic numbers: EINVAL when the call is allowed, never a reboot. */
        return result(syscall(SYS_reboot, 0, 0, 0, NULL));
    if (!strcmp(c, "mount-tmpfs"))
        return result(mount("none", a1, "tmpfs", 0, NULL));
    if (!strcmp(c, "umount"))
        return result(umount2(a1, MNT_DETACH));
    if (!strcmp(c, "mkdir"))
        return result(mkdir(a1, 0755));
    if (!strcmp(c, "read"))
        return do_read(a1);
    if (!strcmp(c, "open-write"))
        return result(open(a1, O_WRONLY));
    if (!strcmp(c, "write"))
    {
        int fd = open(a1, O_WRONLY);
        if (fd < 0)
            return fail();
        const char *text = argc > 3 ? argv[3] : "";
        return result(write(fd, text, strlen(text)));
    }
    if (!strcmp(c, "mknod-open") && argc > 5)
        return do_mknod_open(argv[2], argv[3], argv[4], argv[5]);
    if (!strcmp(c, "sethostname-same"))
        return do_sethostname_same();
    if (!strcmp(c, "raw-socket"))
        return result(socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
    if (!strcmp(c, "fds"))
        return list_fds("/proc/self/fd", 1);
    if (!strcmp(c, "fds-of")) {
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%d/fd", atoi(a1));
        return list_fds(dir, 0);
    }
    if (!strcmp(c, "listen-never-accept"))
    {
        /* A TCP server whose kernel completes every connection (up to the
         * backlog) and which never accepts one: clients stay connected. */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(a1))};
        if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 65535))
            return fail();
        printf("ok listening\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (!strcmp(c, "exe-attack"))
        return do_exe_attack(a1);
    if (!strcmp(c, "ls"))
    {
        DIR *d = opendir(a1);
        if (!d)
            return fail();
        struct dirent *e;
        printf("ok");
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                printf(" %s", e->d_name);
        printf("\n");
        return 0;
    }
    fprintf(stderr, "probe: unknown command %s\n", c);
    return 2;
}
