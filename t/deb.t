#!/usr/bin/perl

# The Debian package (make deb, docs/packaging.md) in the machine's own
# Debian nginx: its name, architecture, Depends (the nginx ABI, hiredis,
# libmongoc, libbson) and files; dpkg -i enables it; a site in
# /etc/nginx/sites-enabled/ with the shipped configuration's http content
# passes nginx -t of the system's configuration; a master of our own (its
# own prefix, pid and logs: not the system service) loads the module
# through /etc/nginx/modules-enabled/ and serves a timeline; installed
# again (an upgrade) it stays enabled; dpkg -r and dpkg -P then leave none
# of the package's files behind.  Root only: it changes the system, and
# puts it back as it was (also when it dies).
#
# make deb builds the package first when build/*.deb is missing or older
# than its sources (about 20 s); with it built, this takes seconds.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(short follow_each none_failed post);
use Time::HiRes qw(time);
use Fcntl qw(:flock);

my $PKG = 'libnginx-mod-http-feed';
my $ETC = '/etc/nginx';
my $SO = '/usr/lib/nginx/modules/ngx_http_feed_module.so';
my $AVAILABLE = '/usr/share/nginx/modules-available/mod-http-feed.conf';
my $ENABLED = "$ETC/modules-enabled/50-mod-http-feed.conf";
my $DOC = "/usr/share/doc/$PKG";
my $SITE = "feed-deb-test-$$";

# where the package puts files, or the test does: each as it was at the end
my @DIRS = ("$ETC/modules-enabled", '/usr/share/nginx/modules-available',
    '/usr/lib/nginx/modules', "$ETC/sites-available", "$ETC/sites-enabled");

plan skip_all => 'installs a package into the system: root only'
    if $> != 0;
plan skip_all => 'the package is the normal build: no sanitizer in it'
    if $FeedTest::ASAN;

# one t/deb.t at a time on a machine (another worktree's): they install and
# remove the same package
open(my $lock, '>', '/run/lock/feed-deb-test.lock') or die "lock: $!\n";
flock($lock, LOCK_EX) or die "lock: $!\n";

plan skip_all => "$PKG is installed already: not this test's to remove"
    unless absent();
plan skip_all => 'the system nginx service is running: installing the '
    . 'package would reload it' if system_nginx_running();

my $ROOT = FeedTest->root;
my %before = map { $_ => [ listing($_) ] } @DIRS;
my $installed;

# -------------------------------------------------------------- the build --

my $version = changelog_version();
chomp(my $arch = `dpkg --print-architecture`);
my $deb = "$ROOT/build/${PKG}_${version}_$arch.deb";

my $mtime = (stat $deb)[9] // 0;
my $t0 = time;
my $make = `make -s -C $ROOT deb 2>&1`;
is($?, 0, 'make deb') or diag($make);
note(sprintf('make deb: %.0f s, %s', time - $t0,
    ((stat $deb)[9] // 0) == $mtime ? 'up to date' : 'built'));
ok(-f $deb, "build/${PKG}_${version}_$arch.deb") or do {
    done_testing();
    exit;
};

# ----------------------------------------------------------- its metadata --

my %f = map { $_ => deb_field($_) } qw(Package Architecture Version Depends);
is($f{Package}, $PKG, 'Package');
is($f{Architecture}, $arch, 'Architecture');
is($f{Version}, $version, "Version: debian/changelog's");

my $abi = nginx_abi();
my @deps = split /,\s*/, $f{Depends} // '';
ok((grep { $_ eq $abi } @deps), "Depends on $abi")
    or diag("Depends: $f{Depends}");
ok(`dpkg-query -W -f='\${Provides}' nginx 2>/dev/null` =~ /\Q$abi\E/,
    "the machine's nginx provides $abi");
for my $lib (qw(libhiredis0.14 libmongoc-1.0-0 libbson-1.0-0)) {
    ok((grep { /^\Q$lib\E\b/ } @deps), "Depends on $lib")
        or diag("Depends: $f{Depends}");
}

my %files = map { m{^\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\.(/\S*?)/?$} ? ($1 => 1)
    : () } `dpkg-deb -c $deb`;
my @want = ($SO, $AVAILABLE, "$DOC/README.md", "$DOC/copyright",
    map({ "$DOC/examples/" . base($_) } glob "$ROOT/conf/*.conf"),
    map({ "$DOC/docs/" . base($_) } glob "$ROOT/docs/*.md"));
ok($files{$_}, "contains $_") for @want;
ok(!grep({ m{^/etc/} } keys %files), 'nothing in /etc: postinst enables it');

like(`dpkg-deb -I $deb postinst 2>&1`,
    qr{mod-http-feed\.conf:50-mod-http-feed\.conf},
    'postinst enables mod-http-feed.conf as 50-mod-http-feed.conf');

# ------------------------------------------------------------ dpkg -i --

my ($ok, $out) = dpkg('-i', $deb);
$installed = 1;
ok($ok, 'dpkg -i') or diag($out);
is(status(), 'install ok installed', 'installed');
ok(-f $SO, "$SO installed");
is(readlink($ENABLED) // '', $AVAILABLE, "enabled: $ENABLED");
is(slurp($ENABLED), "load_module modules/ngx_http_feed_module.so;\n",
    'its load file');

# ------------------------------- a site with the shipped configuration --

my $t = FeedTest->new;
my $dir = $t->dir;

$t->start_backends;

write_file("$ETC/sites-available/$SITE", site_conf($t));
symlink("$ETC/sites-available/$SITE", "$ETC/sites-enabled/$SITE")
    or die "$SITE: $!\n";

$out = `/usr/sbin/nginx -t 2>&1`;
is($?, 0, "nginx -t: the system's configuration with the site") or diag($out);

# the load file names the module relative to nginx's prefix; Debian's
# prefix, /usr/share/nginx, has modules -> /usr/lib/nginx/modules, and so
# does ours
symlink('/usr/lib/nginx/modules', "$dir/modules") or die "modules: $!\n";

write_file("$dir/nginx.conf", <<"EOF");
include $ENABLED;

daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log info;
user root;

events {
    worker_connections 1024;
}

http {
    access_log $dir/access.log;
@{[ join '', map { "    ${_}_temp_path $dir/tmp/$_;\n" }
    qw(client_body proxy fastcgi uwsgi scgi) ]}
    include $ETC/sites-enabled/$SITE;
}
EOF
$t->{conf} = "$dir/nginx.conf";
$t->run;

my $maps = slurp('/proc/' . $t->pid('nginx') . '/maps');
like($maps, qr{\Q$SO\E}, "the master runs the installed $SO");

none_failed([ follow_each($t, 'db', 'da') ], 'da follows db');
my $id = post($t, 'db', 'hello from the package');
ok($id, 'db posts');

my $r = $t->wait_for(5, sub {
    my $r = $t->get('/users/da/timeline');
    return $r->{status} == 200 && @{$r->{json}{items} || []} ? $r : undef;
}) || $t->get('/users/da/timeline');
is(join(' ', map { $_->{id} } @{$r->{json}{items} || []}), $id // '',
    'the post in the timeline') or diag(short($r));

$t->finish;
remove_site();

# ---------------------------------------- dpkg -i again: as an upgrade --

# postinst given the version before keeps the module enabled
($ok, $out) = dpkg('-i', $deb);
ok($ok, 'dpkg -i again, as an upgrade') or diag($out);
is(status(), 'install ok installed', 'installed');
is(readlink($ENABLED) // '', $AVAILABLE, 'still enabled');

# --------------------------------------------------- dpkg -r, dpkg -P --

($ok, $out) = dpkg('-r', $PKG);
ok($ok, 'dpkg -r') or diag($out);
is(status(), 'deinstall ok config-files', 'removed');
ok(!-e $SO, "$SO removed");
ok(!-e $AVAILABLE, "$AVAILABLE removed");
ok(!-e $ENABLED, "$ENABLED removed");

($ok, $out) = dpkg('-P', $PKG);
ok($ok, 'dpkg -P') or diag($out);
$installed = 0 if $ok;
ok(absent(), 'purged') or diag(status());

for my $d (@DIRS) {
    is(join(' ', listing($d)), join(' ', @{$before{$d}}),
        "$d as it was");
}

ok(!system_nginx_running(), 'the system nginx service was not started');

done_testing();

# a test that died: the site and the package go all the same
END {
    local $?;
    remove_site();
    dpkg('-P', $PKG) if $installed;
}

# ----------------------------------------------------------------- helpers --

# conf/nginx.conf's http content as a site (included in Debian's http{}),
# on this test's Redis, MongoDB stand-in and port: thread_pool is a main
# context directive (the module's MongoDB calls use nginx's default pool
# then) and Debian's nginx.conf sets default_type already (the site sets
# its own in its server)
sub site_conf {
    my ($t) = @_;

    my ($http) = $t->shipped_conf =~ /^http \{\n(.*)^\}/ms
        or die "conf/nginx.conf: no http block\n";

    $http =~ s/^\s*feed_thread_pool\s[^;]*;\n//m;
    $http =~ s/^\s*(default_type\s[^;]*;)\n//m
        or die "conf/nginx.conf: no default_type\n";
    my $type = $1;
    $http =~ s/^(\s*server \{\n)/$1        $type\n/m;

    $http =~ s/%%PORT_(\w+)%%/$t->port(lc $1)/ge;
    $http =~ s/%%MONGO_URI%%/$t->mongo_uri/ge;

    return $http;
}

sub remove_site {
    unlink("$ETC/sites-enabled/$SITE", "$ETC/sites-available/$SITE");
}

# dpkg with its output; waits for the lock another dpkg or apt holds
sub dpkg {
    my @args = @_;
    my $out;
    for (1 .. 60) {
        $out = `dpkg @args 2>&1`;
        return (1, $out) if $? == 0;
        last unless $out =~ /lock/;
        sleep 1;
    }
    return (0, $out);
}

sub status {
    my $s = `dpkg-query -W -f='\${Status}' $PKG 2>/dev/null`;
    return $? == 0 ? $s : '';
}

# not installed, nor its configuration left (never installed, or purged)
sub absent { status() =~ /^(|\S+ ok not-installed)$/ }

sub deb_field {
    my ($name) = @_;
    chomp(my $v = `dpkg-deb -f $deb $name 2>/dev/null`);
    return $v;
}

# the ABI Debian's nginx-dev gives modules built against it (dh_nginx)
sub nginx_abi {
    my $f = '/usr/share/nginx/src/debian/libnginx-mod.abisubstvars';
    my ($abi) = slurp($f) =~ /^nginx:abi=(\S+)/m;
    return $abi // die "$f: no nginx:abi\n";
}

sub changelog_version {
    my ($v) = slurp("$ROOT/debian/changelog") =~ /^\S+ \(([^)]+)\)/
        or die "debian/changelog: no version\n";
    return $v;
}

# the service's master, from the pid file Debian's nginx.conf names
sub system_nginx_running {
    my ($pid) = slurp('/run/nginx.pid') =~ /(\d+)/;
    return $pid && kill(0, $pid);
}

sub listing {
    my ($d) = @_;
    opendir(my $dh, $d) or return ();
    return sort grep { !/^\.\.?$/ } readdir $dh;
}

sub base { (my $b = $_[0]) =~ s{.*/}{}; $b }

sub slurp {
    open my $fh, '<', $_[0] or return '';
    local $/;
    return <$fh> // '';
}

sub write_file {
    my ($file, $text) = @_;
    open my $fh, '>', $file or die "$file: $!\n";
    print $fh $text;
    close $fh or die "$file: $!\n";
}
