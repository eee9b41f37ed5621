// Live cost preview of the new-request form.
//
// Reads the pools, profiles, tenant policies and quota balances the page embeds (json_script
// "request-form-data"), keeps the profile list to the chosen pool's profiles, and shows, as the user
// types, what the request costs (compute slices, memory slots, GPU-equivalents), what quota is left
// after it, and whether it would be approved at once or go to a manager. It only mirrors the rules of
// allocations.services.request_allocation for display; the server decides on submit.
// In a time-sliced or MPS pool the request is shares of a memory size instead of MIG slices: the profile field
// gives way to the memory (and, MPS, thread) fields, costs are told in GiB and percent of a GPU
// (allocations/sharing/units.py), and the pool's isolation warning shows before submit.
(function () {
  "use strict";

  var dataNode = document.getElementById("request-form-data");
  var form = document.getElementById("request-form");
  if (!dataNode || !form) {
    return;
  }
  var data = JSON.parse(dataNode.textContent);
  var el = function (id) {
    return document.getElementById(id);
  };
  var tenantInput = form.elements.namedItem("tenant");
  var poolSelect = form.elements.namedItem("pool");
  var profileSelect = form.elements.namedItem("profile");
  var countInput = form.elements.namedItem("count");
  var leaseInput = form.elements.namedItem("lease_hours");
  var memoryInput = form.elements.namedItem("memory_gib");
  var threadInput = form.elements.namedItem("thread_percentage");
  // A tenant's auto-approve bound of N compute slices allows shares up to N/7 of a GPU (services/share_requests.py).
  var MIG_COMPUTE_SLICES_PER_GPU = 7;

  function byId(list, id) {
    for (var i = 0; i < list.length; i++) {
      if (String(list[i].id) === String(id)) {
        return list[i];
      }
    }
    return null;
  }

  function currentPool() {
    return byId(data.pools, poolSelect.value);
  }

  function currentTenant() {
    return byId(data.tenants, tenantInput.value);
  }

  function currentProfile(pool) {
    if (!pool) {
      return null;
    }
    for (var i = 0; i < pool.profiles.length; i++) {
      if (pool.profiles[i].name === profileSelect.value) {
        return pool.profiles[i];
      }
    }
    return null;
  }

  function plural(n, one, many) {
    return n + " " + (n === 1 ? one : many);
  }

  function isShared(pool) {
    return pool.kind !== "mig";
  }

  // Percent of a GPU and GiB one share costs, and its exact GPU-equivalents (allocations/sharing/units.py).
  function shareCost(pool, memoryMib, threads) {
    var compute = pool.kind === "mps" ? threads || 0 : Math.ceil((100 * memoryMib) / pool.gpu_memory_mib);
    return { compute: compute, memory: Math.ceil(memoryMib / 1024), gpus: memoryMib / pool.gpu_memory_mib };
  }

  function decimalNumber(input) {
    var raw = input.value.trim();
    return /^\d+(\.\d+)?$/.test(raw) ? parseFloat(raw) : null;
  }

  function showSharing(pool) {
    var shared = isShared(pool);
    el("profile-field").hidden = shared;
    el("share-fields").hidden = !shared;
    el("thread-field").hidden = pool.kind !== "mps";
    el("isolation-warning").hidden = !pool.isolation_warning;
    el("gpu-eq-help").hidden = shared;
    el("gpu-eq-help-shared").hidden = !shared;
    setText("isolation-warning-text", pool.isolation_warning);
    form.parentNode.querySelectorAll(".unit-compute").forEach(function (node) {
      node.textContent = shared ? "% of a GPU" : "Compute slices";
    });
    form.parentNode.querySelectorAll(".unit-memory").forEach(function (node) {
      node.textContent = shared ? "GiB" : "Memory slots";
    });
  }

  function gpuEq(pool, compute, memory) {
    return Math.max(compute / pool.compute_slices, memory / pool.memory_slices);
  }

  function fmt(x) {
    return x.toFixed(2);
  }

  function wholeNumber(input) {
    var raw = input.value.trim();
    return /^\d+$/.test(raw) ? parseInt(raw, 10) : null;
  }

  function setText(id, text) {
    var node = el(id);
    if (node) {
      node.textContent = text;
    }
  }

  // Keep only the chosen pool's profiles in the profile list (the page lists every pool's without script).
  function rebuildProfiles() {
    var pool = currentPool();
    if (!pool) {
      return;
    }
    var previous = profileSelect.value;
    while (profileSelect.firstChild) {
      profileSelect.removeChild(profileSelect.firstChild);
    }
    pool.profiles.forEach(function (p) {
      var label =
        p.name + " — " + plural(p.compute_slices, "compute slice", "compute slices") + ", " +
        plural(p.memory_slices, "memory slot", "memory slots") + (p.memory_gib ? ", " + p.memory_gib + " GiB" : "");
      var option = new Option(label, p.name);
      option.selected = p.name === previous;
      profileSelect.appendChild(option);
    });
  }

  // Why the request would not fit the remaining quota, or null: quota_shortfall() in services/quotas.py.
  function shortfall(quota, pool, profile, count, compute, memory) {
    if (!quota) {
      return "Your tenant has no quota in " + pool.name + ".";
    }
    var freeCompute = quota.compute_limit - quota.compute_used;
    var freeMemory = quota.memory_limit - quota.memory_used;
    var shared = isShared(pool);
    if (compute > freeCompute) {
      return "It needs " + compute + (shared ? " % of a GPU; " : " compute slices; ") + Math.max(freeCompute, 0) + " of " + quota.compute_limit + " are free.";
    }
    if (memory > freeMemory) {
      return "It needs " + memory + (shared ? " GiB; " : " memory slots; ") + Math.max(freeMemory, 0) + " of " + quota.memory_limit + " are free.";
    }
    if (shared) {
      return null;
    }
    var cap = quota.profile_caps[profile.name];
    if (cap !== undefined) {
      var held = quota.held[profile.name] || 0;
      if (held + count > cap) {
        return "Your tenant may hold at most " + cap + " × " + profile.name + "; " + held + " are held.";
      }
    }
    return null;
  }

  function verdict(kind, title, reason) {
    var box = el("cost-verdict");
    box.className = "verdict verdict--" + kind;
    setText("verdict-title", title);
    setText("verdict-reason", reason);
  }

  function update() {
    var pool = currentPool();
    var tenant = currentTenant();
    var profile = currentProfile(pool);
    if (!pool || !tenant) {
      return;
    }
    var count = wholeNumber(countInput);
    var lease = wholeNumber(leaseInput);
    var n = count === null ? 0 : count;
    var compute = profile ? profile.compute_slices * n : 0;
    var memory = profile ? profile.memory_slices * n : 0;
    var quota = tenant.quotas[String(pool.id)] || null;
    var shared = isShared(pool);
    var gib = shared ? decimalNumber(memoryInput) : null;
    var threads = shared ? wholeNumber(threadInput) : null;
    var memoryMib = gib === null ? 0 : Math.floor(gib * 1024);
    var share = shared ? shareCost(pool, memoryMib, threads) : null;
    if (share) {
      compute = share.compute * n;
      memory = share.memory * n;
    }
    showSharing(pool);

    setText("model-name", pool.gpu_model);
    setText("model-compute", String(pool.compute_slices));
    setText("model-memory", String(pool.memory_slices));
    form.parentNode.querySelectorAll(".model-compute").forEach(function (node) {
      node.textContent = String(pool.compute_slices);
    });
    form.parentNode.querySelectorAll(".model-memory").forEach(function (node) {
      node.textContent = String(pool.memory_slices);
    });
    setText("cost-compute", String(compute));
    setText("cost-memory", String(memory));
    setText("cost-gpu", fmt(share ? share.gpus * n : gpuEq(pool, compute, memory)));
    setText("profile-info", shared
      ? "Each share may use its GPU memory of a " + pool.gpu_model + " (" + (pool.gpu_memory_mib / 1024).toFixed(1) +
        " GiB per GPU)" + (pool.kind === "mps" ? " and its share of the GPU's threads." : "; time-slicing guarantees no compute.")
      : profile
      ? "Each " + profile.name + " slice takes " + plural(profile.compute_slices, "compute slice", "compute slices") +
        " and " + plural(profile.memory_slices, "memory slot", "memory slots") + " of a " + pool.gpu_model + "."
      : "");

    setText("quota-scope", tenant.name + " in " + pool.name);
    var freeCompute = quota ? Math.max(quota.compute_limit - quota.compute_used, 0) : 0;
    var freeMemory = quota ? Math.max(quota.memory_limit - quota.memory_used, 0) : 0;
    setText("quota-compute-free", String(freeCompute));
    setText("quota-compute-limit", String(quota ? quota.compute_limit : 0));
    setText("quota-memory-free", String(freeMemory));
    setText("quota-memory-limit", String(quota ? quota.memory_limit : 0));
    setText("quota-gpu-free", fmt(gpuEq(pool, freeCompute, freeMemory)));
    var afterCompute = freeCompute - compute;
    var afterMemory = freeMemory - memory;
    setText("after-compute", afterCompute >= 0 ? String(afterCompute) : "short by " + -afterCompute);
    setText("after-memory", afterMemory >= 0 ? String(afterMemory) : "short by " + -afterMemory);
    setText("after-gpu", afterCompute >= 0 && afterMemory >= 0 ? fmt(gpuEq(pool, afterCompute, afterMemory)) : "—");
    el("after-compute").classList.toggle("is-short", afterCompute < 0);
    el("after-memory").classList.toggle("is-short", afterMemory < 0);

    leaseInput.max = String(tenant.max_lease_hours);
    countInput.max = String(data.max_count);
    setText("lease-help",
      "Up to " + tenant.max_lease_hours + " hours for " + tenant.name + "; leases up to " +
      tenant.auto_approve_max_lease_hours + " hours can be approved automatically.");

    var bad = shared ? shareProblem(pool, memoryMib, threads) : profile ? null : "Choose a MIG profile.";
    var overPolicy = shared
      ? share.gpus * n > tenant.auto_approve_max_compute_slices / MIG_COMPUTE_SLICES_PER_GPU + 1e-9
      : compute > tenant.auto_approve_max_compute_slices;
    if (bad) {
      verdict("invalid", "Cannot be submitted as it is.", bad);
    } else if (count === null || count < 1 || count > data.max_count) {
      verdict("invalid", "Cannot be submitted as it is.", "Ask for between 1 and " + data.max_count + " slices.");
    } else if (lease === null || lease < 1 || lease > tenant.max_lease_hours) {
      verdict("invalid", "Cannot be submitted as it is.",
        "The lease must be between 1 and " + tenant.max_lease_hours + " hours for " + tenant.name + ".");
    } else {
      var missing = shortfall(quota, pool, profile, count, compute, memory);
      if (missing) {
        verdict("manager", "Goes to a manager: it does not fit the remaining quota.",
          missing + " A manager can approve it once quota is free or raised.");
      } else if (overPolicy) {
        verdict("manager", "Goes to a manager for approval.",
          "It costs more than " + (shared
            ? fmt(tenant.auto_approve_max_compute_slices / MIG_COMPUTE_SLICES_PER_GPU) + " GPU-equivalents"
            : plural(tenant.auto_approve_max_compute_slices, "compute slice", "compute slices")) +
          ", the most " + tenant.name + " approves automatically.");
      } else if (lease > tenant.auto_approve_max_lease_hours) {
        verdict("manager", "Goes to a manager for approval.",
          "Leases over " + tenant.auto_approve_max_lease_hours + " hours need a manager in " + tenant.name + ".");
      } else {
        verdict("auto", "Approved automatically.",
          "It fits the remaining quota and " + tenant.name + "’s auto-approve policy.");
      }
    }
  }

  // What keeps a share request from being submitted: services/share_requests.py's checks, for display.
  function shareProblem(pool, memoryMib, threads) {
    if (memoryMib <= 0 || memoryMib > pool.gpu_memory_mib) {
      return "Give each share between 0.25 and " + Math.floor(pool.gpu_memory_mib / 1024) + " GiB of memory.";
    }
    if (pool.kind === "mps" && (threads === null || threads < 1 || threads > 100)) {
      return "Give each MPS share's active threads, from 1 to 100 %.";
    }
    return null;
  }

  poolSelect.addEventListener("change", function () {
    rebuildProfiles();
    update();
  });
  [tenantInput, profileSelect, countInput, leaseInput, memoryInput, threadInput].forEach(function (input) {
    input.addEventListener("input", update);
    input.addEventListener("change", update);
  });
  function describeBy(input, id) {
    var ids = (input.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
    if (ids.indexOf(id) < 0) {
      ids.push(id);
    }
    input.setAttribute("aria-describedby", ids.join(" "));
  }
  describeBy(leaseInput, "lease-help");
  describeBy(profileSelect, "profile-info");
  rebuildProfiles();
  update();
  el("cost-preview").hidden = false;
})();
