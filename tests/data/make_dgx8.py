#!/usr/bin/env python3
"""Writes dgx8.xml: the hwloc 2.x topology of an 8-GPU, 2-socket server that the topology tests
use instead of real hardware. Each socket is one package with one NUMA node and 16 cores (one
hardware thread each) and two PCIe switches; each switch holds two GPUs (CUDA and NVML OS
devices) and two InfiniBand adapters (mlx5_N, ibN). GPU g and mlx5_g sit on switch g // 2.

    python3 tests/data/make_dgx8.py > tests/data/dgx8.xml
"""

CORES = 16        # per package
SWITCH_BUS = [0x18, 0x38, 0x98, 0xB8]
gp = [0]


def gpi():
    gp[0] += 1
    return gp[0]


def mask(lo, n):
    return "0x%08x" % (((1 << n) - 1) << lo)


def sets(cpus, nodes):
    return ('cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"'
            % (cpus, cpus, nodes, nodes))


def pcidev(ind, bus, cls, ids, osdevs):
    out = ['%s<object type="PCIDev" gp_index="%d" pci_busid="0000:%02x:00.0" '
           'pci_type="%s %s 00" pci_link_speed="0.000000">' % (ind, gpi(), bus, cls, ids)]
    for name, kind, sub in osdevs:
        out.append('%s  <object type="OSDev" gp_index="%d" name="%s" subtype="%s" '
                   'osdev_type="%d"/>' % (ind, gpi(), name, sub, kind))
    out.append('%s</object>' % ind)
    return out


def switch(ind, s):
    b = SWITCH_BUS[s]
    out = ['%s<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" '
           'bridge_pci="0000:[%02x-%02x]" pci_busid="0000:%02x:00.0" '
           'pci_type="0604 [1000:c030] [1000:a064] 00 00" pci_link_speed="0.000000">'
           % (ind, gpi(), b + 1, b + 4, b)]
    for k in range(2):
        g = 2 * s + k
        out += pcidev(ind + "  ", b + 1 + k, "0302", "[10de:2330] [10de:16c1] a1",
                      [("cuda%d" % g, 5, "CUDA"), ("nvml%d" % g, 1, "NVML")])
    for k in range(2):
        n = 2 * s + k
        out += pcidev(ind + "  ", b + 3 + k, "0207", "[15b3:101b] [15b3:0007] 00",
                      [("ib%d" % n, 2, "Network"), ("mlx5_%d" % n, 3, "OpenFabrics")])
    out.append('%s</object>' % ind)
    return out


def package(p):
    cpus, node = mask(p * CORES, CORES), "0x%08x" % (1 << p)
    out = ['    <object type="Package" os_index="%d" %s gp_index="%d">'
           % (p, sets(cpus, node), gpi()),
           '      <object type="NUMANode" os_index="%d" %s gp_index="%d" '
           'local_memory="274877906944"/>' % (p, sets(cpus, node), gpi())]
    for c in range(CORES):
        cpu = p * CORES + c
        one = "0x%08x" % (1 << cpu)
        out += ['      <object type="Core" os_index="%d" %s gp_index="%d">'
                % (c, sets(one, node), gpi()),
                '        <object type="PU" os_index="%d" %s gp_index="%d"/>'
                % (cpu, sets(one, node), gpi()),
                '      </object>']
    lo, hi = (0x00, 0x7F) if p == 0 else (0x80, 0xFF)
    out.append('      <object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" '
               'bridge_pci="0000:[%02x-%02x]">' % (gpi(), lo, hi))
    for s in (2 * p, 2 * p + 1):
        out += switch("        ", s)
    out.append('      </object>')
    out.append('    </object>')
    return out


def main():
    cpus = mask(0, 2 * CORES)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
             '<topology version="2.0">',
             '  <object type="Machine" os_index="0" %s allowed_cpuset="%s" '
             'allowed_nodeset="0x00000003" gp_index="%d">'
             % (sets(cpus, "0x00000003"), cpus, gpi())]
    for p in range(2):
        lines += package(p)
    lines += ['  </object>', '</topology>']
    print("\n".join(lines))


main()
